//! Local-feature head (SPEC §7): an MLP on `[enc_out, dec_out]` per token, its outputs pixel-shuffled
//! into a full-resolution descriptor map (descriptor channels, then the descriptor confidence).

use burn::tensor::Tensor;

use super::layers::{Loader, StackedMlp};
use crate::config::LocalFeatConfig;
use crate::error::Error;

/// `downstream_head1.head_local_features` and `downstream_head2...`, weights stacked.
#[derive(Clone, Debug)]
pub(crate) struct LocalFeat {
    mlp: StackedMlp,
    patch: usize,
}

impl LocalFeat {
    pub fn load(
        l: &Loader,
        prefixes: [&str; 2],
        c: &LocalFeatConfig,
        patch: usize,
    ) -> Result<Self, Error> {
        let [a, b] = prefixes.map(|p| l.mlp(p, c.in_dim, c.hidden_dim, c.out_dim));
        Ok(LocalFeat {
            mlp: StackedMlp::stack(a?, b?),
            patch,
        })
    }

    /// Head `s` alone.
    pub fn slot(&self, s: usize) -> Self {
        LocalFeat {
            mlp: self.mlp.slot(s),
            patch: self.patch,
        }
    }

    /// Raw MLP output `[S * B, N, C * P * P]` for the encoder outputs and the last decoder
    /// outputs (slot-major along the batch, one slot per weight set).
    pub fn raw(&self, enc: Tensor<3>, dec: Tensor<3>) -> Tensor<3> {
        self.mlp.forward_slots(Tensor::cat(vec![enc, dec], 2))
    }

    /// Pixel shuffle: `[B, N, C * P * P]` (per token `[channel][row][column]`) to a channels-last
    /// `[B, h * P, w * P, C]` map.
    pub fn shuffle(&self, raw: Tensor<3>, h: usize, w: usize) -> Tensor<4> {
        let [b, _, cpp] = raw.dims();
        let p = self.patch;
        let c = cpp / (p * p);
        raw.reshape([b, h, w, c, p, p])
            .permute([0, 1, 4, 2, 5, 3])
            .reshape([b, h * p, w * p, c])
    }
}
