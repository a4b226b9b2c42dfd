//! DPT head (SPEC §6): four hooked token maps brought to four resolutions, projected to the
//! fusion width, fused coarse to fine with residual conv units and x2 bilinear upsampling
//! (align_corners = True), and an output head giving 4 channels at full resolution.
//!
//! Both heads' weights are stacked on a leading axis ([`StackedConv2d`]): with the two views'
//! maps stacked slot-major along the batch, every layer runs both heads in one launch.

use burn::tensor::Tensor;
use burn::tensor::module::interpolate;
use burn::tensor::ops::{InterpolateMode, InterpolateOptions};

use super::layers::{Loader, StackedConv2d, StackedLinear, Trace, nchw, relu4, tokens_to_map};
use crate::config::DptConfig;
use crate::error::Error;

/// Bilinear x2 upsampling with `align_corners = True` of a channels-last map (Burn's kernel works
/// channels-last internally, so the permuted views cost no copies).
pub(crate) fn up2(x: Tensor<4>) -> Tensor<4> {
    let [_, h, w, _] = x.dims();
    interpolate(
        nchw(&x),
        InterpolateOptions::new(InterpolateMode::Bilinear)
            .with_align_corners(true)
            .with_output_size([2 * h, 2 * w]),
    )
    .permute([0, 2, 3, 1])
}

/// `conv2(relu(conv1(relu(z)))) + z`.
#[derive(Clone, Debug)]
struct ResConfUnit {
    conv1: StackedConv2d,
    conv2: StackedConv2d,
}

/// One convolution of both heads, `{head prefix}{name}`.
#[allow(clippy::too_many_arguments)]
fn stacked_conv(
    l: &Loader,
    prefixes: [&str; 2],
    name: &str,
    inp: usize,
    out: usize,
    k: usize,
    stride: usize,
    pad: usize,
    bias: bool,
) -> Result<StackedConv2d, Error> {
    let [a, b] = prefixes.map(|p| l.conv(&format!("{p}{name}"), inp, out, k, stride, pad, bias));
    Ok(StackedConv2d::stack(a?, b?))
}

impl ResConfUnit {
    fn load(l: &Loader, prefixes: [&str; 2], name: &str, f: usize) -> Result<Self, Error> {
        Ok(ResConfUnit {
            conv1: stacked_conv(l, prefixes, &format!("{name}.conv1"), f, f, 3, 1, 1, true)?,
            conv2: stacked_conv(l, prefixes, &format!("{name}.conv2"), f, f, 3, 1, 1, true)?,
        })
    }

    fn slot(&self, s: usize) -> Self {
        ResConfUnit {
            conv1: self.conv1.slot(s),
            conv2: self.conv2.slot(s),
        }
    }

    fn forward(&self, z: Tensor<4>) -> Tensor<4> {
        self.conv2
            .forward(relu4(self.conv1.forward(relu4(z.clone()))))
            + z
    }
}

/// `scratch.refinenet{k}`: `out_conv(up2(RCU_2(a [+ RCU_1(skip)])))`.
#[derive(Clone, Debug)]
struct Fusion {
    rcu1: Option<ResConfUnit>,
    rcu2: ResConfUnit,
    out_conv: StackedConv2d,
}

impl Fusion {
    fn load(
        l: &Loader,
        prefixes: [&str; 2],
        name: &str,
        f: usize,
        with_skip: bool,
    ) -> Result<Self, Error> {
        Ok(Fusion {
            // refinenet4.resConfUnit1 exists in the checkpoint but is never used.
            rcu1: if with_skip {
                Some(ResConfUnit::load(
                    l,
                    prefixes,
                    &format!("{name}.resConfUnit1"),
                    f,
                )?)
            } else {
                None
            },
            rcu2: ResConfUnit::load(l, prefixes, &format!("{name}.resConfUnit2"), f)?,
            out_conv: stacked_conv(
                l,
                prefixes,
                &format!("{name}.out_conv"),
                f,
                f,
                1,
                1,
                0,
                true,
            )?,
        })
    }

    fn slot(&self, s: usize) -> Self {
        Fusion {
            rcu1: self.rcu1.as_ref().map(|r| r.slot(s)),
            rcu2: self.rcu2.slot(s),
            out_conv: self.out_conv.slot(s),
        }
    }

    fn forward(&self, a: Tensor<4>, skip: Option<Tensor<4>>) -> Tensor<4> {
        let x = match (skip, &self.rcu1) {
            (Some(s), Some(rcu1)) => a + rcu1.forward(s),
            (None, _) => a,
            (Some(_), None) => unreachable!("refinenet4 takes a single input"),
        };
        self.out_conv.forward(up2(self.rcu2.forward(x)))
    }
}

/// `act_postprocess.{k}`: a 1x1 projection on the tokens, then (k = 0, 1) a stride = kernel
/// transposed convolution as a matrix product plus pixel shuffle, or (k = 3) a stride-2 3x3 conv.
#[derive(Clone, Debug)]
struct ActPost {
    proj: StackedLinear,
    up: Option<(StackedLinear, usize)>,
    down: Option<StackedConv2d>,
}

impl ActPost {
    fn slot(&self, s: usize) -> Self {
        ActPost {
            proj: self.proj.slot(s),
            up: self.up.as_ref().map(|(u, k)| (u.slot(s), *k)),
            down: self.down.as_ref().map(|d| d.slot(s)),
        }
    }

    fn forward(&self, tokens: Tensor<3>, h: usize, w: usize) -> Tensor<4> {
        let x = self.proj.forward_slots(tokens);
        match (&self.up, &self.down) {
            (Some((up, s)), _) => {
                // Outputs per token are [r][c][channel]: shuffle rows and columns in.
                let s = *s;
                let y = up.forward_slots(x);
                let [b, _, cs] = y.dims();
                let c = cs / (s * s);
                y.reshape([b, h, w, s, s, c])
                    .permute([0, 1, 3, 2, 4, 5])
                    .reshape([b, h * s, w * s, c])
            }
            (None, Some(down)) => down.forward(tokens_to_map(x, h, w)),
            (None, None) => tokens_to_map(x, h, w),
        }
    }
}

/// `downstream_head1.dpt` and `downstream_head2.dpt`, weights stacked (slot = head).
#[derive(Clone, Debug)]
pub(crate) struct Dpt {
    hooks: [usize; 4],
    act: Vec<ActPost>,
    layer_rn: Vec<StackedConv2d>,
    /// refinenet1 .. refinenet4.
    refinenet: Vec<Fusion>,
    head0: StackedConv2d,
    head2: StackedConv2d,
    head4: StackedConv2d,
}

impl Dpt {
    /// Both heads' DPTs, `{prefixes[v]}.act_postprocess...` and so on.
    pub fn load(l: &Loader, prefixes: [&str; 2], c: &DptConfig) -> Result<Self, Error> {
        let (f, ld, dt) = (c.feature_dim, c.layer_dims, c.dim_tokens);
        let ap = |k: usize, j: usize| format!(".act_postprocess.{k}.{j}");
        let lin = |name: &str, inp: usize, out: usize| -> Result<StackedLinear, Error> {
            let [a, b] = prefixes.map(|p| l.conv_as_linear(&format!("{p}{name}"), inp, out, 1));
            Ok(StackedLinear::stack(a?, b?))
        };
        let up =
            |name: &str, d: usize, s: usize| -> Result<Option<(StackedLinear, usize)>, Error> {
                let [a, b] =
                    prefixes.map(|p| l.conv_transpose_as_linear(&format!("{p}{name}"), d, d, s));
                Ok(Some((StackedLinear::stack(a?, b?), s)))
            };
        let act = vec![
            ActPost {
                proj: lin(&ap(0, 0), dt[0], ld[0])?,
                up: up(&ap(0, 1), ld[0], 4)?,
                down: None,
            },
            ActPost {
                proj: lin(&ap(1, 0), dt[1], ld[1])?,
                up: up(&ap(1, 1), ld[1], 2)?,
                down: None,
            },
            ActPost {
                proj: lin(&ap(2, 0), dt[2], ld[2])?,
                up: None,
                down: None,
            },
            ActPost {
                proj: lin(&ap(3, 0), dt[3], ld[3])?,
                up: None,
                down: Some(stacked_conv(
                    l,
                    prefixes,
                    &ap(3, 1),
                    ld[3],
                    ld[3],
                    3,
                    2,
                    1,
                    true,
                )?),
            },
        ];
        let layer_rn = (0..4)
            .map(|k| {
                let name = format!(".scratch.layer{}_rn", k + 1);
                stacked_conv(l, prefixes, &name, ld[k], f, 3, 1, 1, false)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let refinenet = (1..=4)
            .map(|r| Fusion::load(l, prefixes, &format!(".scratch.refinenet{r}"), f, r != 4))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Dpt {
            hooks: c.hooks,
            act,
            layer_rn,
            refinenet,
            head0: stacked_conv(l, prefixes, ".head.0", f, f / 2, 3, 1, 1, true)?,
            head2: stacked_conv(l, prefixes, ".head.2", f / 2, c.last_dim, 3, 1, 1, true)?,
            head4: stacked_conv(
                l,
                prefixes,
                ".head.4",
                c.last_dim,
                c.num_channels,
                1,
                1,
                0,
                true,
            )?,
        })
    }

    /// Head `s` alone (views of the stacked weights), for views of different sizes.
    pub fn slot(&self, s: usize) -> Self {
        Dpt {
            hooks: self.hooks,
            act: self.act.iter().map(|a| a.slot(s)).collect(),
            layer_rn: self.layer_rn.iter().map(|c| c.slot(s)).collect(),
            refinenet: self.refinenet.iter().map(|f| f.slot(s)).collect(),
            head0: self.head0.slot(s),
            head2: self.head2.slot(s),
            head4: self.head4.slot(s),
        }
    }

    /// `tokens`: the token lists `[enc_out, dec_1, ..., dec_norm(dec_L)]` of the views in `views`
    /// (1-based view numbers, one per weight slot), concatenated slot-major along the batch;
    /// returns the channels-last `[S * B, H, W, 4]` output. Traced internals are recorded
    /// `[B, C, H, W]` per view.
    pub fn forward(
        &self,
        tokens: &[Tensor<3>],
        h: usize,
        w: usize,
        views: &[usize],
        trace: &mut Trace,
    ) -> Tensor<4> {
        let mut rn = Vec::with_capacity(4);
        for k in 0..4 {
            let a = self.act[k].forward(tokens[self.hooks[k]].clone(), h, w);
            trace.record_views(views, &format!("dpt.act{}", k + 1), &nchw(&a));
            let r = self.layer_rn[k].forward(a);
            trace.record_views(views, &format!("dpt.rn{}", k + 1), &nchw(&r));
            rn.push(r);
        }
        let path4 = self.refinenet[3].forward(rn[3].clone(), None);
        trace.record_views(views, "dpt.refinenet4_uncropped", &nchw(&path4));
        let [_, h3, w3, _] = rn[2].dims();
        let mut path = path4.narrow(1, 0, h3).narrow(2, 0, w3);
        for k in (0..3).rev() {
            let name = format!("dpt.refinenet{}", k + 1);
            trace.record_views(views, &format!("{name}.in0"), &nchw(&path));
            trace.record_views(views, &format!("{name}.in1"), &nchw(&rn[k]));
            path = self.refinenet[k].forward(path, Some(rn[k].clone()));
            trace.record_views(views, &name, &nchw(&path));
        }
        let x = self.head0.forward(path);
        trace.record_views(views, "dpt.head0", &nchw(&x));
        let x = up2(x);
        trace.record_views(views, "dpt.head1", &nchw(&x));
        let x = self.head2.forward(x);
        trace.record_views(views, "dpt.head2", &nchw(&x));
        let x = relu4(x);
        trace.record_views(views, "dpt.head3", &nchw(&x));
        self.head4.forward(x)
    }
}
