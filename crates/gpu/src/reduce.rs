//! Reductions (sum, max, min, count of non-zero) over `f32` and `u32` buffers,
//! optionally column-wise over a row-major `[rows, cols]` matrix.

use cubecl::prelude::*;

use crate::{BLOCK, Gpu, GpuBuffer, GpuError, block_id};

/// What to reduce with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    /// Number of non-zero entries (masks). Returned in the element type.
    CountNonZero,
}

const ROWS_PER_UNIT: usize = 4;
const ROWS_PER_BLOCK: usize = BLOCK as usize * ROWS_PER_UNIT;

#[cube]
fn combine<N: Numeric>(a: N, b: N, #[comptime] op: u32) -> N {
    let mut r = a + b;
    if comptime![op == 1] {
        r = max(a, b);
    } else if comptime![op == 2] {
        r = min(a, b);
    }
    r
}

#[cube]
fn identity<N: Numeric>(#[comptime] op: u32) -> N {
    let mut r = N::from_int(0);
    if comptime![op == 1] {
        r = N::min_value();
    } else if comptime![op == 2] {
        r = N::max_value();
    }
    r
}

/// op: 0 sum, 1 max, 2 min, 3 count non-zero (first level only; later levels sum).
#[cube(launch, launch_unchecked)]
fn reduce_cols<N: Numeric>(
    input: &[N],
    output: &mut [N],
    rows: u32,
    cols: u32,
    #[comptime] op: u32,
) {
    let block = block_id();
    let t = UNIT_POS as usize;
    let rows = rows as usize;
    let cols = cols as usize;
    let mut smem = Shared::<[N]>::new_slice(256usize);
    let combine_op = comptime![if op == 3 { 0u32 } else { op }];
    for c in 0..cols {
        let mut acc = identity::<N>(combine_op);
        #[unroll]
        for i in 0..4usize {
            let r = block * 1024 + i * 256 + t;
            if r < rows {
                let mut v = input[r * cols + c];
                if comptime![op == 3] {
                    v = select(v != N::from_int(0), N::from_int(1), N::from_int(0));
                }
                acc = combine::<N>(acc, v, combine_op);
            }
        }
        smem[t] = acc;
        sync_cube();
        let mut stride = 128usize;
        while stride > 0 {
            if t < stride {
                smem[t] = combine::<N>(smem[t], smem[t + stride], combine_op);
            }
            sync_cube();
            stride /= 2;
        }
        if t == 0 {
            output[block * cols + c] = smem[0];
        }
        sync_cube();
    }
}

fn op_code(op: ReduceOp) -> u32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Max => 1,
        ReduceOp::Min => 2,
        ReduceOp::CountNonZero => 3,
    }
}

/// Reduce each column of a row-major `[rows, cols]` matrix, on the device.
/// Returns a buffer of `cols` values. An empty input gives the identity
/// (0 for sums and counts, the type's lowest/highest value for max/min).
pub fn reduce_columns<N: Numeric + CubeElement + bytemuck::Pod>(
    gpu: &Gpu,
    input: &GpuBuffer<N>,
    cols: usize,
    op: ReduceOp,
) -> GpuBuffer<N> {
    assert!(
        cols > 0 && input.len().is_multiple_of(cols),
        "reduce_columns: length not a multiple of cols"
    );
    let mut rows = input.len() / cols;
    let mut code = op_code(op);
    let mut current = input.clone();
    loop {
        let blocks = rows.div_ceil(ROWS_PER_BLOCK).max(1);
        let out = gpu.alloc::<N>(blocks * cols);
        crate::launch!(
            gpu,
            reduce_cols::<N>(
                gpu.client(),
                gpu.grid(blocks),
                CubeDim::new_1d(BLOCK),
                current.arg(),
                out.arg(),
                rows as u32,
                cols as u32,
                code,
            )
        );
        // Later levels combine partial results: counts become sums.
        if code == 3 {
            code = 0;
        }
        current = out;
        rows = blocks;
        if rows == 1 {
            return current;
        }
    }
}

/// Reduce a whole buffer to one value, read back to the host.
pub fn reduce<N: Numeric + CubeElement + bytemuck::Pod>(
    gpu: &Gpu,
    input: &GpuBuffer<N>,
    op: ReduceOp,
) -> Result<N, GpuError> {
    let out = reduce_columns(gpu, input, 1, op);
    Ok(gpu.read(&out)?[0])
}
