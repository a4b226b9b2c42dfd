//! The rasterizer as a Burn backend extension, with its own backward pass, so
//! splat parameters and the camera pose are ordinary Burn tensors under autodiff.
//!
//! `rasterize` returns one `[height, width, 5]` tensor: r, g, b (background
//! composited), alpha, accumulated depth. Gradients flow to the means `[N, 3]`,
//! log-scales `[N, 3]`, quaternions `[N, 4]`, opacity logits `[N]`, SH
//! coefficients `[N, K, 3]` and the world-to-camera pose `[3, 4]`.
//! The backward pass re-runs the (cheap) forward binning instead of keeping
//! its sort buffers alive between the two passes.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::{Autodiff, NodeId};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, DType, Shape, TensorMetadata, backend_extension};
use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
use rust3r_gpu::{Gpu, GpuBuffer};

use crate::kernels::rasterize::{pack_image, unpack_image};
use crate::{Camera, GpuSplats, RenderOptions, render, render_backward};

/// Camera intrinsics and render settings that are not differentiated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RasterSettings {
    /// Intrinsics and image size (undistorted).
    pub intrinsics: rust3r_geometry::PinholeCamera,
    pub sh_degree: u32,
    pub antialiased: bool,
    pub background: [f32; 3],
}

#[backend_extension(Cube, Autodiff)]
pub trait SplatBackend: Backend {
    /// Render; see the module docs for shapes.
    fn rasterize(
        means: FloatTensor<Self>,
        log_scales: FloatTensor<Self>,
        quats: FloatTensor<Self>,
        opacity_logits: FloatTensor<Self>,
        sh: FloatTensor<Self>,
        world_to_camera: FloatTensor<Self>,
        settings: RasterSettings,
    ) -> FloatTensor<Self>;

    /// Gradients of all six inputs given the gradient of the packed image.
    // Burn backend operations take their tensors as separate arguments and return tuples.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn rasterize_backward(
        means: FloatTensor<Self>,
        log_scales: FloatTensor<Self>,
        quats: FloatTensor<Self>,
        opacity_logits: FloatTensor<Self>,
        sh: FloatTensor<Self>,
        world_to_camera: FloatTensor<Self>,
        grad_image: FloatTensor<Self>,
        settings: RasterSettings,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    );
}

fn buffer(t: CubeTensor) -> GpuBuffer<f32> {
    rust3r_gpu::cube_tensor_buffer(t)
}

fn tensor(gpu: &Gpu, buf: GpuBuffer<f32>, shape: Shape) -> CubeTensor {
    CubeTensor::new_contiguous(
        gpu.client().clone(),
        gpu.device().clone(),
        shape,
        buf.handle,
        DType::F32,
    )
}

#[allow(clippy::too_many_arguments)]
fn setup(
    means: CubeTensor,
    log_scales: CubeTensor,
    quats: CubeTensor,
    opacity_logits: CubeTensor,
    sh: CubeTensor,
    world_to_camera: CubeTensor,
    s: &RasterSettings,
) -> (Gpu, GpuSplats, Camera, RenderOptions) {
    let gpu = Gpu::from_parts(means.client.clone(), means.device.clone());
    let pose = gpu
        .read(&buffer(world_to_camera))
        .expect("reading the camera pose from the device");
    let mut m = [[0.0f64; 4]; 4];
    for r in 0..3 {
        for c in 0..4 {
            m[r][c] = pose[r * 4 + c] as f64;
        }
    }
    m[3][3] = 1.0;
    let camera = Camera::new(s.intrinsics, m);
    let splats = GpuSplats {
        means: buffer(means),
        log_scales: buffer(log_scales),
        quats: buffer(quats),
        opacity_logits: buffer(opacity_logits),
        sh: crate::ShCoeffs::F32(buffer(sh)),
        sh_degree: s.sh_degree,
    };
    let opts = RenderOptions {
        background: s.background,
        antialiased: s.antialiased,
        ..Default::default()
    };
    (gpu, splats, camera, opts)
}

impl SplatBackend for CubeBackend {
    fn rasterize(
        means: CubeTensor,
        log_scales: CubeTensor,
        quats: CubeTensor,
        opacity_logits: CubeTensor,
        sh: CubeTensor,
        world_to_camera: CubeTensor,
        settings: RasterSettings,
    ) -> CubeTensor {
        let (width, height) = (settings.intrinsics.width, settings.intrinsics.height);
        let (gpu, splats, camera, opts) = setup(
            means,
            log_scales,
            quats,
            opacity_logits,
            sh,
            world_to_camera,
            &settings,
        );
        let (out, _) = render(&gpu, &splats, &camera, &opts).expect("rasterize");
        let npix = (width * height) as usize;
        let packed = gpu.alloc::<f32>(npix * 5);
        pack_image::launch(
            gpu.client(),
            gpu.grid_1d(npix),
            rust3r_gpu::BLOCK_DIM,
            out.rgb.arg(),
            out.alpha.arg(),
            out.depth.arg(),
            packed.arg(),
            npix as u32,
        );
        tensor(
            &gpu,
            packed,
            Shape::new([height as usize, width as usize, 5]),
        )
    }

    fn rasterize_backward(
        means: CubeTensor,
        log_scales: CubeTensor,
        quats: CubeTensor,
        opacity_logits: CubeTensor,
        sh: CubeTensor,
        world_to_camera: CubeTensor,
        grad_image: CubeTensor,
        settings: RasterSettings,
    ) -> (
        CubeTensor,
        CubeTensor,
        CubeTensor,
        CubeTensor,
        CubeTensor,
        CubeTensor,
    ) {
        let shapes = [
            means.shape(),
            log_scales.shape(),
            quats.shape(),
            opacity_logits.shape(),
            sh.shape(),
            world_to_camera.shape(),
        ];
        let (width, height) = (settings.intrinsics.width, settings.intrinsics.height);
        let (gpu, splats, camera, opts) = setup(
            means,
            log_scales,
            quats,
            opacity_logits,
            sh,
            world_to_camera,
            &settings,
        );
        let (out, state) = render(&gpu, &splats, &camera, &opts).expect("rasterize");
        let npix = (width * height) as usize;
        let (v_rgb, v_alpha, v_depth) = (
            gpu.alloc::<f32>(npix * 3),
            gpu.alloc::<f32>(npix),
            gpu.alloc::<f32>(npix),
        );
        unpack_image::launch(
            gpu.client(),
            gpu.grid_1d(npix),
            rust3r_gpu::BLOCK_DIM,
            buffer(grad_image).arg(),
            v_rgb.arg(),
            v_alpha.arg(),
            v_depth.arg(),
            npix as u32,
        );
        let g = render_backward(&gpu, &splats, &out, &state, &v_rgb, &v_alpha, &v_depth)
            .expect("rasterize backward");
        let pose: Vec<f32> = g.world_to_camera.iter().flatten().copied().collect();
        let [s0, s1, s2, s3, s4, s5] = shapes;
        (
            tensor(&gpu, g.means, s0),
            tensor(&gpu, g.log_scales, s1),
            tensor(&gpu, g.quats, s2),
            tensor(&gpu, g.opacity_logits, s3),
            tensor(&gpu, g.sh, s4),
            tensor(&gpu, gpu.upload(&pose), s5),
        )
    }
}

#[derive(Debug)]
struct RasterizeOp;

type RasterState = ([NodeId; 6], RasterSettings);

impl<B: SplatBackend> Backward<B, 6> for RasterizeOp {
    type State = RasterState;

    fn backward(
        self,
        ops: Ops<Self::State, 6>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let grad = grads.consume::<B>(&ops.node);
        let (ids, s) = ops.state;
        let [a, b, c, d, e, f] =
            ids.map(|id| checkpointer.retrieve_node_output::<B::FloatTensorPrimitive>(id));
        let (ga, gb, gc, gd, ge, gf) = B::rasterize_backward(a, b, c, d, e, f, grad, s);
        for (node, g) in ops.parents.into_iter().zip([ga, gb, gc, gd, ge, gf]) {
            if let Some(node) = node {
                grads.register::<B>(node.id, g);
            }
        }
    }
}

impl<B: SplatBackend, C: CheckpointStrategy> SplatBackend for Autodiff<B, C> {
    fn rasterize(
        means: FloatTensor<Self>,
        log_scales: FloatTensor<Self>,
        quats: FloatTensor<Self>,
        opacity_logits: FloatTensor<Self>,
        sh: FloatTensor<Self>,
        world_to_camera: FloatTensor<Self>,
        settings: RasterSettings,
    ) -> FloatTensor<Self> {
        let inputs = [
            means,
            log_scales,
            quats,
            opacity_logits,
            sh,
            world_to_camera,
        ];
        let nodes = [
            inputs[0].node(),
            inputs[1].node(),
            inputs[2].node(),
            inputs[3].node(),
            inputs[4].node(),
            inputs[5].node(),
        ];
        let forward = |[a, b, c, d, e, f]: [B::FloatTensorPrimitive; 6]| {
            B::rasterize(a, b, c, d, e, f, settings)
        };
        match RasterizeOp.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(mut prep) => {
                let ids = [
                    prep.checkpoint(&inputs[0]),
                    prep.checkpoint(&inputs[1]),
                    prep.checkpoint(&inputs[2]),
                    prep.checkpoint(&inputs[3]),
                    prep.checkpoint(&inputs[4]),
                    prep.checkpoint(&inputs[5]),
                ];
                let out = forward(inputs.map(|t| t.into_primitive()));
                prep.finish((ids, settings), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward(inputs.map(|t| t.into_primitive()))),
        }
    }

    fn rasterize_backward(
        _means: FloatTensor<Self>,
        _log_scales: FloatTensor<Self>,
        _quats: FloatTensor<Self>,
        _opacity_logits: FloatTensor<Self>,
        _sh: FloatTensor<Self>,
        _world_to_camera: FloatTensor<Self>,
        _grad_image: FloatTensor<Self>,
        _settings: RasterSettings,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    ) {
        unimplemented!("second-order gradients of the rasterizer are not supported")
    }
}

/// Render Burn tensors (any device of the wgpu backend, with or without autodiff).
/// Returns `[height, width, 5]`: r, g, b, alpha, accumulated depth.
#[allow(clippy::too_many_arguments)]
pub fn rasterize(
    means: burn::tensor::Tensor<2>,
    log_scales: burn::tensor::Tensor<2>,
    quats: burn::tensor::Tensor<2>,
    opacity_logits: burn::tensor::Tensor<1>,
    sh: burn::tensor::Tensor<3>,
    world_to_camera: burn::tensor::Tensor<2>,
    s: &RasterSettings,
) -> burn::tensor::Tensor<3> {
    use burn::backend::Dispatch;
    burn::tensor::Tensor::from_dispatch(<Dispatch as SplatBackend>::rasterize(
        means.into_dispatch(),
        log_scales.into_dispatch(),
        quats.into_dispatch(),
        opacity_logits.into_dispatch(),
        sh.into_dispatch(),
        world_to_camera.into_dispatch(),
        *s,
    ))
}
