//! Matrix products through the vendor BLAS where there is one.
//!
//! [`matmul`] is `lhs.matmul(rhs)` for Burn tensors. On the CUDA backend it runs cuBLAS
//! (`cublasGemmStridedBatchedEx`, loaded at run time like the driver) on the stream CubeCL orders
//! the tensors' work on, so it interleaves with CubeCL's launches and is recorded into CUDA graphs
//! like them. Binary32 products run on TF32 tensor cores (PyTorch's `allow_tf32` setting) unless
//! [`crate::CudaTuning::tf32`] is off; binary16 and bfloat16 products accumulate in binary32.
//!
//! Everywhere else (wgpu, builds without `cuda`, a CUDA machine without `libcublas`, or
//! [`crate::CudaTuning::cublas`] off), and for the layouts cuBLAS cannot address without a copy,
//! it is Burn's own matmul. On an H100 it halved the MASt3R network's replayed frame (67 to 34 ms, docs/benchmarks/journal.md).
//!
//! Each call asks CubeCL's device thread for the three pointers (a blocking round trip each), so
//! a product launched outside a recording costs the host more than CubeCL's own kernel would;
//! recorded into a CUDA graph, that cost is paid once.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, backend_extension};
use burn::tensor::Tensor;
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;

#[backend_extension(Cube)]
pub trait BlasBackend: Backend {
    /// `lhs [.., M, K] @ rhs [.., K, N]`, batch dimensions broadcast as in `float_matmul`.
    fn blas_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
}

impl BlasBackend for CubeBackend {
    fn blas_matmul(lhs: CubeTensor, rhs: CubeTensor) -> CubeTensor {
        #[cfg(feature = "cuda")]
        let (lhs, rhs) = match cublas::matmul(lhs, rhs) {
            Ok(out) => return out,
            Err(operands) => *operands,
        };
        <CubeBackend as burn::backend::ops::FloatTensorOps<CubeBackend>>::float_matmul(lhs, rhs)
    }
}

/// `lhs.matmul(rhs)`, through cuBLAS on the CUDA backend (module docs).
pub fn matmul<const D: usize>(lhs: Tensor<D>, rhs: Tensor<D>) -> Tensor<D> {
    if !uses_cublas(&lhs) {
        return lhs.matmul(rhs);
    }
    use burn::backend::Dispatch;
    Tensor::from_dispatch(<Dispatch as BlasBackend>::blas_matmul(
        lhs.into_dispatch(),
        rhs.into_dispatch(),
    ))
}

/// Whether [`matmul`] runs cuBLAS for `t`: it lives on a CUDA device of the CubeCL backend (not
/// under autodiff: the extension has no backward pass) and the library loads.
pub fn uses_cublas<const D: usize>(t: &Tensor<D>) -> bool {
    #[cfg(feature = "cuda")]
    {
        matches!(
            t.device().as_dispatch(),
            burn::backend::DispatchDevice::Cube(cubecl::Device::Cuda(_))
        ) && cublas::available()
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = t;
        false
    }
}

/// Whether [`matmul`] may use cuBLAS ([`crate::CudaTuning::cublas`], applied by
/// [`crate::Gpu::new`] when it opens a CUDA device).
#[cfg(feature = "cuda")]
pub(crate) fn set_cublas(on: bool) {
    cublas::ENABLED.store(on, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(feature = "cuda")]
mod cublas {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Mutex, OnceLock};

    /// [`crate::CudaTuning::cublas`] of the CUDA device opened.
    pub(super) static ENABLED: AtomicBool = AtomicBool::new(true);

    use burn::backend::DType;
    use burn_cubecl::tensor::CubeTensor;
    use cubecl_cuda::{CudaServer, GpuResource};
    use cudarc::cublas::sys as cb;
    use cudarc::driver::sys as cu;

    /// Workspace handed to cuBLAS, so a recorded graph never asks it to allocate (32 MiB is what
    /// NVIDIA recommends on Hopper).
    const WORKSPACE_BYTES: usize = 32 << 20;

    pub fn available() -> bool {
        static PRESENT: OnceLock<bool> = OnceLock::new();
        if !ENABLED.load(Ordering::Relaxed) {
            return false;
        }
        *PRESENT.get_or_init(|| {
            let present = unsafe { cb::is_culib_present() };
            if !present {
                tracing::warn!(
                    "libcublas not found: matrix products on CUDA use CubeCL's kernels (slower); \
                     put the CUDA toolkit's or the nvidia-cublas wheel's lib directory on the library path"
                );
            }
            present
        })
    }

    /// TF32 tensor cores for binary32 products, as the vendored runtime advertises them.
    fn tf32() -> bool {
        cubecl_cuda::tf32_enabled()
    }

    /// A cuBLAS handle bound to one stream, with its own workspace: products on different
    /// streams (CubeCL gives each thread its own) may run at the same time, and a shared
    /// workspace would be a race between them.
    struct Blas {
        stream: usize,
        handle: usize,
    }

    /// One cuBLAS handle per stream, used under the lock (a handle is not thread-safe).
    static HANDLES: Mutex<Vec<Blas>> = Mutex::new(Vec::new());

    fn check(what: &str, status: cb::cublasStatus_t) -> Result<(), String> {
        if status == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            Ok(())
        } else {
            Err(format!("{what}: {status:?}"))
        }
    }

    fn check_cu(what: &str, status: cu::CUresult) -> Result<(), String> {
        if status == cu::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(format!("{what}: {status:?}"))
        }
    }

    /// A strided view of one operand: element strides of the batch dimensions (0 where
    /// broadcast), of the rows and of the columns.
    struct Operand {
        batch: Vec<i64>,
        rs: i64,
        cs: i64,
    }

    fn operand(t: &CubeTensor, out_batch: &[usize]) -> Option<Operand> {
        if t.meta.is_tiled() || t.qparams.is_some() {
            return None;
        }
        let shape: &[usize] = &t.meta.shape;
        let strides: &[usize] = &t.meta.strides;
        let d = shape.len();
        if d < 2 || d - 2 != out_batch.len() {
            return None;
        }
        let batch = (0..d - 2)
            .map(|i| {
                if shape[i] == out_batch[i] && shape[i] != 1 {
                    Some(strides[i] as i64)
                } else if shape[i] == 1 {
                    Some(0)
                } else {
                    None
                }
            })
            .collect::<Option<Vec<_>>>()?;
        let (rows, cols) = (shape[d - 2] as i64, shape[d - 1] as i64);
        let (mut rs, mut cs) = (strides[d - 2] as i64, strides[d - 1] as i64);
        // A single row or column: its stride along the unit dimension is free.
        if rows == 1 {
            rs = cols.max(1) * cs.max(1);
        }
        if cols == 1 {
            cs = 1;
            if rows == 1 {
                rs = 1;
            }
        }
        let row_major = cs == 1 && rs >= cols.max(1);
        let col_major = rs == 1 && cs >= rows.max(1);
        (row_major || col_major).then_some(Operand { batch, rs, cs })
    }

    /// (operation, leading dimension) of `x` (`rows x cols`) for the column-major product that
    /// needs the transpose of `x` as its operand (see [`matmul`]).
    fn transposed_arg(x: &Operand) -> (cb::cublasOperation_t, i64) {
        if x.cs == 1 {
            // Row-major: column-major reading of the memory is already the transpose.
            (cb::cublasOperation_t::CUBLAS_OP_N, x.rs)
        } else {
            (cb::cublasOperation_t::CUBLAS_OP_T, x.cs)
        }
    }

    type Operands = Box<(CubeTensor, CubeTensor)>;

    /// The product through cuBLAS, or the operands back when it does not apply.
    pub fn matmul(lhs: CubeTensor, rhs: CubeTensor) -> Result<CubeTensor, Operands> {
        match try_matmul(&lhs, &rhs) {
            Ok(Some(out)) => Ok(out),
            Ok(None) => Err(Box::new((lhs, rhs))),
            Err(e) => {
                static WARNED: OnceLock<()> = OnceLock::new();
                WARNED.get_or_init(|| {
                    tracing::warn!("cuBLAS matmul failed ({e}); using CubeCL's kernels")
                });
                Err(Box::new((lhs, rhs)))
            }
        }
    }

    fn try_matmul(lhs: &CubeTensor, rhs: &CubeTensor) -> Result<Option<CubeTensor>, String> {
        let (elem, elem_bytes) = match lhs.dtype {
            DType::F32 => (cb::cudaDataType::CUDA_R_32F, 4),
            DType::F16 => (cb::cudaDataType::CUDA_R_16F, 2),
            DType::BF16 => (cb::cudaDataType::CUDA_R_16BF, 2),
            _ => return Ok(None),
        };
        if rhs.dtype != lhs.dtype {
            return Ok(None);
        }
        let ls: &[usize] = &lhs.meta.shape;
        let rs_: &[usize] = &rhs.meta.shape;
        let d = ls.len();
        if d < 2 || rs_.len() != d {
            return Ok(None);
        }
        let (m, k, n) = (ls[d - 2], ls[d - 1], rs_[d - 1]);
        if rs_[d - 2] != k || m == 0 || n == 0 || k == 0 {
            return Ok(None);
        }
        let mut out_batch = Vec::with_capacity(d - 2);
        for i in 0..d - 2 {
            let (a, b) = (ls[i], rs_[i]);
            if a != b && a != 1 && b != 1 {
                return Ok(None);
            }
            out_batch.push(a.max(b));
        }
        let (Some(a), Some(b)) = (operand(lhs, &out_batch), operand(rhs, &out_batch)) else {
            return Ok(None);
        };
        if [m, n, k].iter().any(|&x| x > i32::MAX as usize) {
            return Ok(None);
        }
        // Output [batch.., m, n], contiguous.
        let mut c_batch = vec![0i64; d - 2];
        let mut acc = (m * n) as i64;
        for i in (0..d - 2).rev() {
            c_batch[i] = acc;
            acc *= out_batch[i] as i64;
        }
        let batches = out_batch.iter().product::<usize>();
        // Batch dimensions of more than one entry, innermost last: (size, [stride of a, b, c]).
        let dims: Vec<(usize, [i64; 3])> = (0..d - 2)
            .filter(|&i| out_batch[i] > 1)
            .map(|i| (out_batch[i], [a.batch[i], b.batch[i], c_batch[i]]))
            .collect();
        // The innermost dimensions become one strided batch while every operand's strides chain
        // (a broadcast operand's zero strides chain too); the rest is a loop on the host.
        let (mut inner_count, mut inner_strides) = (1usize, [0i64; 3]);
        let mut outer_dims = dims.len();
        while outer_dims > 0 {
            let (size, s) = dims[outer_dims - 1];
            let chains =
                inner_count == 1 || (0..3).all(|o| s[o] == inner_strides[o] * inner_count as i64);
            if !chains {
                break;
            }
            if inner_count == 1 {
                inner_strides = s;
            }
            inner_count *= size;
            outer_dims -= 1;
        }
        if inner_count > i32::MAX as usize {
            return Ok(None);
        }
        let [sa, sb, sc] = inner_strides;
        let client = lhs.client.clone();
        let out_shape: Vec<usize> = out_batch.iter().copied().chain([m, n]).collect();
        let handle = client.empty(batches * m * n * elem_bytes);
        let out = CubeTensor::new_contiguous(
            client.clone(),
            lhs.device.clone(),
            burn::backend::Shape::from(out_shape),
            handle,
            lhs.dtype,
        );
        let res = |t: &CubeTensor| {
            client
                .get_resource::<CudaServer>(t.handle.clone())
                .map_err(|e| format!("device pointer: {e:?}"))
        };
        let (ra, rb, rc) = (res(lhs)?, res(rhs)?, res(&out)?);
        let (pa, pb, pc): (&GpuResource, &GpuResource, &GpuResource) =
            (ra.resource(), rb.resource(), rc.resource());
        let stream = pc.stream;

        let mut handles = HANDLES.lock().unwrap_or_else(|e| e.into_inner());
        let blas = unsafe { blas_for(&mut handles, stream)? };
        let h = blas.handle as cb::cublasHandle_t;
        // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS's first operand is B^T (n x k),
        // its second A^T (k x m), its output C^T (n x m) with leading dimension n.
        let (op_b, ldb) = transposed_arg(&b);
        let (op_a, lda) = transposed_arg(&a);
        let compute = match lhs.dtype {
            DType::F32 if tf32() => cb::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            _ => cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let outer = &dims[..outer_dims];
        let outer_count = outer.iter().map(|&(size, _)| size).product::<usize>();
        for o in 0..outer_count {
            let mut off = [0i64; 3];
            let mut rem = o;
            for &(size, st) in outer.iter().rev() {
                let idx = (rem % size) as i64;
                rem /= size;
                for (x, s) in off.iter_mut().zip(st) {
                    *x += idx * s;
                }
            }
            let [oa, ob, oc] = off;
            let eb = elem_bytes as u64;
            let status = unsafe {
                cb::cublasGemmStridedBatchedEx(
                    h,
                    op_b,
                    op_a,
                    n as i32,
                    m as i32,
                    k as i32,
                    &alpha as *const f32 as *const _,
                    (pb.ptr + ob as u64 * eb) as *const _,
                    elem,
                    ldb as i32,
                    sb,
                    (pa.ptr + oa as u64 * eb) as *const _,
                    elem,
                    lda as i32,
                    sa,
                    &beta as *const f32 as *const _,
                    (pc.ptr + oc as u64 * eb) as *mut _,
                    elem,
                    n as i32,
                    sc,
                    inner_count as i32,
                    compute,
                    cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            };
            check("cublasGemmStridedBatchedEx", status)?;
        }
        drop(handles);
        drop((ra, rb, rc));
        Ok(Some(out))
    }

    /// The handle for `stream`, its context made current on this thread.
    unsafe fn blas_for(handles: &mut Vec<Blas>, stream: cu::CUstream) -> Result<&Blas, String> {
        let mut ctx: cu::CUcontext = std::ptr::null_mut();
        unsafe {
            check_cu("cuStreamGetCtx", cu::cuStreamGetCtx(stream, &mut ctx))?;
            let mut current: cu::CUcontext = std::ptr::null_mut();
            check_cu("cuCtxGetCurrent", cu::cuCtxGetCurrent(&mut current))?;
            if current != ctx {
                check_cu("cuCtxSetCurrent", cu::cuCtxSetCurrent(ctx))?;
            }
        }
        if let Some(i) = handles.iter().position(|b| b.stream == stream as usize) {
            return Ok(&handles[i]);
        }
        let mut h: cb::cublasHandle_t = std::ptr::null_mut();
        let mut ws: cu::CUdeviceptr = 0;
        unsafe {
            check("cublasCreate", cb::cublasCreate_v2(&mut h))?;
            check_cu(
                "cuMemAlloc (cuBLAS workspace)",
                cu::cuMemAlloc_v2(&mut ws, WORKSPACE_BYTES),
            )?;
            check(
                "cublasSetStream",
                cb::cublasSetStream_v2(h, stream as cb::cudaStream_t),
            )?;
            // After the stream: cublasSetStream puts a handle back on cuBLAS's own workspace
            // pool, which allocates (and so breaks a graph recording).
            check(
                "cublasSetWorkspace",
                cb::cublasSetWorkspace_v2(h, ws as *mut _, WORKSPACE_BYTES),
            )?;
        }
        // Handles and their workspaces live as long as the process (one per stream CubeCL made).
        handles.push(Blas {
            stream: stream as usize,
            handle: h as usize,
        });
        Ok(handles.last().expect("just pushed"))
    }
}
