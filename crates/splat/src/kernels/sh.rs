//! Real spherical harmonics up to degree 3 (the 3DGS basis and ordering),
//! evaluation and its adjoint.

use cubecl::prelude::*;

pub const C0: f32 = 0.282_094_8;
pub const C1: f32 = 0.488_602_5;
pub const C2: [f32; 5] = [
    1.092_548_4,
    -1.092_548_4,
    0.315_391_57,
    -1.092_548_4,
    0.546_274_2,
];
pub const C3: [f32; 7] = [
    -0.590_043_6f32,
    2.890_611_4f32,
    -0.457_045_8f32,
    0.373_176_33f32,
    -0.457_045_8f32,
    1.445_305_7f32,
    -0.590_043_6f32,
];

/// Basis function `k` at the unit direction (x, y, z).
#[cube]
pub fn sh_basis(k: u32, x: f32, y: f32, z: f32) -> f32 {
    let xx = x * x;
    let yy = y * y;
    let zz = z * z;
    let mut b = 0.282_094_8f32;
    if k == 1 {
        b = -0.488_602_5f32 * y;
    } else if k == 2 {
        b = 0.488_602_5f32 * z;
    } else if k == 3 {
        b = -0.488_602_5f32 * x;
    } else if k == 4 {
        b = 1.092_548_4f32 * x * y;
    } else if k == 5 {
        b = -1.092_548_4f32 * y * z;
    } else if k == 6 {
        b = 0.315_391_57f32 * (2.0f32 * zz - xx - yy);
    } else if k == 7 {
        b = -1.092_548_4f32 * x * z;
    } else if k == 8 {
        b = 0.546_274_2f32 * (xx - yy);
    } else if k == 9 {
        b = -0.590_043_6f32 * y * (3.0f32 * xx - yy);
    } else if k == 10 {
        b = 2.890_611_4f32 * x * y * z;
    } else if k == 11 {
        b = -0.457_045_8f32 * y * (4.0f32 * zz - xx - yy);
    } else if k == 12 {
        b = 0.373_176_33f32 * z * (2.0f32 * zz - 3.0f32 * xx - 3.0f32 * yy);
    } else if k == 13 {
        b = -0.457_045_8f32 * x * (4.0f32 * zz - xx - yy);
    } else if k == 14 {
        b = 1.445_305_7f32 * z * (xx - yy);
    } else if k == 15 {
        b = -0.590_043_6f32 * x * (xx - 3.0f32 * yy);
    }
    b
}

/// Gradient of basis function `k` with respect to (x, y, z) (direction not yet normalised).
#[cube]
pub fn sh_basis_grad(k: u32, x: f32, y: f32, z: f32) -> (f32, f32, f32) {
    let xx = x * x;
    let yy = y * y;
    let zz = z * z;
    let mut gx = 0.0f32;
    let mut gy = 0.0f32;
    let mut gz = 0.0f32;
    if k == 1 {
        gy = -0.488_602_5f32;
    } else if k == 2 {
        gz = 0.488_602_5f32;
    } else if k == 3 {
        gx = -0.488_602_5f32;
    } else if k == 4 {
        gx = 1.092_548_4f32 * y;
        gy = 1.092_548_4f32 * x;
    } else if k == 5 {
        gy = -1.092_548_4f32 * z;
        gz = -1.092_548_4f32 * y;
    } else if k == 6 {
        gx = -2.0f32 * 0.315_391_57f32 * x;
        gy = -2.0f32 * 0.315_391_57f32 * y;
        gz = 4.0f32 * 0.315_391_57f32 * z;
    } else if k == 7 {
        gx = -1.092_548_4f32 * z;
        gz = -1.092_548_4f32 * x;
    } else if k == 8 {
        gx = 2.0f32 * 0.546_274_2f32 * x;
        gy = -2.0f32 * 0.546_274_2f32 * y;
    } else if k == 9 {
        gx = -0.590_043_6f32 * 6.0f32 * x * y;
        gy = -0.590_043_6f32 * (3.0f32 * xx - 3.0f32 * yy);
    } else if k == 10 {
        gx = 2.890_611_4f32 * y * z;
        gy = 2.890_611_4f32 * x * z;
        gz = 2.890_611_4f32 * x * y;
    } else if k == 11 {
        gx = -0.457_045_8f32 * (-2.0f32 * x * y);
        gy = -0.457_045_8f32 * (4.0f32 * zz - xx - 3.0f32 * yy);
        gz = -0.457_045_8f32 * (8.0f32 * y * z);
    } else if k == 12 {
        gx = 0.373_176_33f32 * (-6.0f32 * x * z);
        gy = 0.373_176_33f32 * (-6.0f32 * y * z);
        gz = 0.373_176_33f32 * (6.0f32 * zz - 3.0f32 * xx - 3.0f32 * yy);
    } else if k == 13 {
        gx = -0.457_045_8f32 * (4.0f32 * zz - 3.0f32 * xx - yy);
        gy = -0.457_045_8f32 * (-2.0f32 * x * y);
        gz = -0.457_045_8f32 * (8.0f32 * x * z);
    } else if k == 14 {
        gx = 1.445_305_7f32 * 2.0f32 * x * z;
        gy = -1.445_305_7f32 * 2.0f32 * y * z;
        gz = 1.445_305_7f32 * (xx - yy);
    } else if k == 15 {
        gx = -0.590_043_6f32 * (3.0f32 * xx - 3.0f32 * yy);
        gy = -0.590_043_6f32 * (-6.0f32 * x * y);
    }
    (gx, gy, gz)
}
