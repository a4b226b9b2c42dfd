//! Training images resident on the device as packed 8-bit RGB (3 bytes per pixel, a quarter
//! of the f32 size), or single 8-bit planes (alpha, masks), unpacked to f32 by a kernel when a
//! step needs them.

use cubecl::prelude::*;
use rust3r_gpu::{Gpu, GpuBuffer};

#[cube(launch)]
fn unpack_rgb8(packed: &[u32], out: &mut [f32], n: u32) {
    let i = rust3r_gpu::global_id();
    if i >= n as usize {
        terminate!();
    }
    let word = packed[i / 4];
    let shift = ((i % 4) * 8) as u32;
    out[i] = ((word >> shift) & 255u32) as f32 * (1.0f32 / 255.0f32);
}

/// Pack bytes little-endian into 32-bit words (zero padded).
pub fn pack_bytes(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(w)
        })
        .collect()
}

/// A packed 8-bit image on the device.
#[derive(Clone, Debug)]
pub struct PackedImage {
    pub data: GpuBuffer<u32>,
    pub width: u32,
    pub height: u32,
    /// Interleaved channels per pixel (3 for RGB, 1 for an alpha or mask plane).
    pub channels: u32,
}

impl PackedImage {
    /// Upload interleaved RGB bytes (`width * height * 3`).
    pub fn upload(gpu: &Gpu, rgb: &[u8], width: u32, height: u32) -> Self {
        assert_eq!(
            rgb.len(),
            (width as usize) * (height as usize) * 3,
            "image size"
        );
        Self {
            data: gpu.upload(&pack_bytes(rgb)),
            width,
            height,
            channels: 3,
        }
    }

    /// Upload a single 8-bit plane (`width * height` bytes, e.g. alpha or a mask).
    pub fn upload_plane(gpu: &Gpu, plane: &[u8], width: u32, height: u32) -> Self {
        assert_eq!(
            plane.len(),
            (width as usize) * (height as usize),
            "plane size"
        );
        Self {
            data: gpu.upload(&pack_bytes(plane)),
            width,
            height,
            channels: 1,
        }
    }

    /// Device bytes held.
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64 * 4
    }

    /// The image as f32 in [0, 1], interleaved (RGB, or one value per pixel for a plane).
    pub fn to_f32(&self, gpu: &Gpu) -> GpuBuffer<f32> {
        let n = (self.width as usize) * (self.height as usize) * self.channels as usize;
        let out = gpu.alloc::<f32>(n);
        if n > 0 {
            unpack_rgb8::launch(
                gpu.client(),
                gpu.grid_1d(n),
                rust3r_gpu::BLOCK_DIM,
                self.data.arg(),
                out.arg(),
                n as u32,
            );
        }
        out
    }
}
