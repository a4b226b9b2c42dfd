//! Patch embedding (SPEC §2): a 16x16 stride-16 convolution, computed as one matrix product on
//! the image cut into patches; token n = y * w + x.

use burn::tensor::Tensor;

use super::layers::Linear;

/// `Conv2d(3 -> E, P, stride P)` as a linear layer on flattened `(channel, row, column)` patches.
#[derive(Clone, Debug)]
pub(crate) struct PatchEmbed {
    pub proj: Linear,
    pub patch: usize,
}

impl PatchEmbed {
    /// `[B, C, H, W]` to `[B, N, E]` tokens of the `H/P x W/P` grid.
    pub fn forward(&self, img: Tensor<4>) -> Tensor<3> {
        let [b, c, hh, ww] = img.dims();
        let p = self.patch;
        let (h, w) = (hh / p, ww / p);
        let patches = img
            .reshape([b, c, h, p, w, p])
            .permute([0, 2, 4, 1, 3, 5])
            .reshape([b, h * w, c * p * p]);
        self.proj.forward(patches)
    }
}
