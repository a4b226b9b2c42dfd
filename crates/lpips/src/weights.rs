//! The two backbones' torchvision layer lists, and LPIPS weights read and checked against them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use rust3r_torch_checkpoint::{TensorF32, TensorFile};

use crate::Error;

/// The backbone network of LPIPS v0.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Net {
    /// torchvision AlexNet (`alexnet-owt-7be5be79.pth`); lpips's default.
    Alex,
    /// torchvision VGG16 (`vgg16-397923af.pth`).
    Vgg,
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Net::Alex => "alex",
            Net::Vgg => "vgg",
        })
    }
}

impl std::str::FromStr for Net {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "alex" | "alexnet" => Ok(Net::Alex),
            "vgg" | "vgg16" => Ok(Net::Vgg),
            other => Err(format!(
                "unknown LPIPS network '{other}' (expected alex or vgg)"
            )),
        }
    }
}

/// One entry of torchvision's `features` list, up to the last LPIPS tap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `Conv2d` (kernel size and channels come from the weights).
    Conv {
        /// Stride in both directions.
        stride: usize,
        /// Zero padding on every side.
        pad: usize,
    },
    /// `ReLU`.
    Relu,
    /// `MaxPool2d` without padding, floor mode.
    Pool {
        /// Window size.
        kernel: usize,
        /// Stride.
        stride: usize,
    },
}

impl Net {
    /// torchvision's `features[0..last tap]` (the final max pool, after the last tap, is never
    /// run). AlexNet: `Conv(k11, s4, p2) ReLU MaxPool(3, 2) Conv(k5, p2) ReLU MaxPool(3, 2)
    /// Conv(k3, p1) ReLU Conv(k3, p1) ReLU Conv(k3, p1) ReLU`; VGG16: 2, 2, 3, 3, 3 `Conv(k3, p1)
    /// ReLU` pairs with `MaxPool(2, 2)` between the blocks.
    pub fn ops(self) -> Vec<Op> {
        let conv = |stride, pad| Op::Conv { stride, pad };
        let pool = |kernel, stride| Op::Pool { kernel, stride };
        match self {
            Net::Alex => vec![
                conv(4, 2),
                Op::Relu,
                pool(3, 2),
                conv(1, 2),
                Op::Relu,
                pool(3, 2),
                conv(1, 1),
                Op::Relu,
                conv(1, 1),
                Op::Relu,
                conv(1, 1),
                Op::Relu,
            ],
            Net::Vgg => {
                let mut ops = Vec::new();
                for (block, convs) in [2, 2, 3, 3, 3].into_iter().enumerate() {
                    if block > 0 {
                        ops.push(pool(2, 2));
                    }
                    for _ in 0..convs {
                        ops.push(conv(1, 1));
                        ops.push(Op::Relu);
                    }
                }
                ops
            }
        }
    }

    /// The end of each of the five slices whose outputs LPIPS compares (`features[a..b]`):
    /// AlexNet `[2, 5, 8, 10, 12]` (after each ReLU), VGG16 `[4, 9, 16, 23, 30]` (relu1_2,
    /// relu2_2, relu3_3, relu4_3, relu5_3).
    pub fn taps(self) -> [usize; 5] {
        match self {
            Net::Alex => [2, 5, 8, 10, 12],
            Net::Vgg => [4, 9, 16, 23, 30],
        }
    }

    /// Indices of the convolutions in `features`.
    pub fn conv_indices(self) -> Vec<usize> {
        self.ops()
            .iter()
            .enumerate()
            .filter(|(_, op)| matches!(op, Op::Conv { .. }))
            .map(|(i, _)| i)
            .collect()
    }

    /// Key -> shape of the released networks: torchvision's `features.*` tensors (backbone) and
    /// lpips's `lin{k}.model.1.weight` (v0.1 linear layers).
    pub fn full_size_layout(self) -> (BTreeMap<String, Vec<usize>>, BTreeMap<String, Vec<usize>>) {
        let (channels, kernels): (Vec<usize>, Vec<usize>) = match self {
            Net::Alex => (vec![64, 192, 384, 256, 256], vec![11, 5, 3, 3, 3]),
            Net::Vgg => (
                vec![
                    64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512,
                ],
                vec![3; 13],
            ),
        };
        let mut backbone = BTreeMap::new();
        let mut cin = 3;
        for ((i, &c), &k) in self.conv_indices().iter().zip(&channels).zip(&kernels) {
            backbone.insert(format!("features.{i}.weight"), vec![c, cin, k, k]);
            backbone.insert(format!("features.{i}.bias"), vec![c]);
            cin = c;
        }
        let lin = tap_convs(self)
            .iter()
            .enumerate()
            .map(|(k, &conv)| {
                let pos = self
                    .conv_indices()
                    .iter()
                    .position(|&i| i == conv)
                    .expect("a conv");
                (lin_key(k), vec![1, channels[pos], 1, 1])
            })
            .collect();
        (backbone, lin)
    }

    /// The network whose convolutions sit exactly at these `features` indices, if any.
    pub fn from_conv_indices(indices: &BTreeSet<usize>) -> Option<Net> {
        [Net::Alex, Net::Vgg]
            .into_iter()
            .find(|n| n.conv_indices().into_iter().collect::<BTreeSet<_>>() == *indices)
    }
}

/// The index of the last convolution before each tap (its channels are the tap's).
fn tap_convs(net: Net) -> [usize; 5] {
    let convs = net.conv_indices();
    net.taps().map(|end| {
        *convs
            .iter()
            .rfind(|&&i| i < end)
            .expect("a conv before each tap")
    })
}

/// lpips's key of the `k`-th linear layer.
pub fn lin_key(k: usize) -> String {
    format!("lin{k}.model.1.weight")
}

/// One convolution of the backbone.
#[derive(Clone, Debug)]
pub struct ConvWeights {
    /// Index in torchvision's `features`.
    pub index: usize,
    /// `[out, in, k, k]`.
    pub weight: TensorF32,
    /// `[out]`.
    pub bias: TensorF32,
    /// Stride (from the architecture).
    pub stride: usize,
    /// Zero padding (from the architecture).
    pub pad: usize,
}

/// Validated LPIPS weights on the host: the backbone's convolutions and the five linear layers.
#[derive(Clone, Debug)]
pub struct LpipsWeights {
    /// The backbone.
    pub net: Net,
    /// Convolutions in `features` order.
    pub convs: Vec<ConvWeights>,
    /// `lin{k}.model.1.weight`, `[1, C_k, 1, 1]`.
    pub lins: Vec<TensorF32>,
}

/// A key -> shape listing of a tensor file (or of tensors in memory), for validation.
struct Listing<'a> {
    path: &'a Path,
    shapes: BTreeMap<String, Vec<usize>>,
}

impl Listing<'_> {
    fn err(&self, message: impl Into<String>) -> Error {
        Error::Weights {
            path: self.path.to_path_buf(),
            message: message.into(),
        }
    }

    /// The shape of `key`, which must exist with `rank` dimensions.
    fn shape(&self, key: &str, rank: usize, what: &str) -> Result<&[usize], Error> {
        let Some(s) = self.shapes.get(key) else {
            return Err(self.err(format!("missing key `{key}` ({what})")));
        };
        if s.len() != rank {
            return Err(self.err(format!(
                "`{key}` has shape {s:?}, expected {rank} dimensions ({what})"
            )));
        }
        Ok(s)
    }
}

/// Which convolutions and linear layers to read, decided from the shapes alone.
struct Plan {
    net: Net,
    /// `(features index, stride, pad)`.
    convs: Vec<(usize, usize, usize)>,
}

/// Checks the backbone listing and decides (or checks) the network.
fn plan_backbone(b: &Listing<'_>, net: Option<Net>) -> Result<Plan, Error> {
    let mut conv_idx = BTreeSet::new();
    for key in b.shapes.keys() {
        let Some(rest) = key.strip_prefix("features.") else {
            continue; // classifier.* and anything else torchvision stores
        };
        let parsed = rest
            .split_once('.')
            .and_then(|(i, p)| Some((i.parse::<usize>().ok()?, p)));
        match parsed {
            Some((i, "weight" | "bias")) => {
                conv_idx.insert(i);
            }
            _ => {
                return Err(b.err(format!(
                    "unexpected key `{key}`: the backbone's `features` may hold only convolution \
                     weights and biases (batch-norm networks are not LPIPS backbones)"
                )));
            }
        }
    }
    if conv_idx.is_empty() {
        let some: Vec<&str> = b.shapes.keys().take(5).map(String::as_str).collect();
        return Err(b.err(format!(
            "no `features.*` tensors: not a torchvision AlexNet / VGG16 state dict (keys: {})",
            if some.is_empty() {
                "none".to_string()
            } else {
                some.join(", ")
            }
        )));
    }
    let net = match net {
        Some(n) => n,
        None => Net::from_conv_indices(&conv_idx).ok_or_else(|| {
            b.err(format!(
                "cannot tell the network from the convolutions at features {:?}: torchvision \
                 AlexNet has them at {:?}, VGG16 at {:?}",
                conv_idx.iter().collect::<Vec<_>>(),
                Net::Alex.conv_indices(),
                Net::Vgg.conv_indices()
            ))
        })?,
    };
    let ops = net.ops();
    for &i in &conv_idx {
        if !matches!(ops.get(i), Some(Op::Conv { .. })) {
            return Err(b.err(format!(
                "unexpected key `features.{i}.weight`/`bias`: torchvision {} has no convolution \
                 at features.{i} (its convolutions are at {:?})",
                name(net),
                net.conv_indices()
            )));
        }
    }
    let mut convs = Vec::new();
    let mut cin = 3usize;
    let mut prev = "the RGB input".to_string();
    for (i, op) in ops.iter().enumerate() {
        let Op::Conv { stride, pad } = *op else {
            continue;
        };
        let wkey = format!("features.{i}.weight");
        let bkey = format!("features.{i}.bias");
        let what = format!("{} convolution", name(net));
        let w = b.shape(&wkey, 4, &what)?;
        let (out, inp, kh, kw) = (w[0], w[1], w[2], w[3]);
        if out == 0 || kh == 0 || kh != kw {
            return Err(b.err(format!(
                "`{wkey}` has shape {w:?}: expected [out, in, k, k] with a square, non-empty kernel"
            )));
        }
        if inp != cin {
            return Err(b.err(format!(
                "`{wkey}` has shape {w:?}: it takes {inp} input channels but {prev} has {cin}"
            )));
        }
        let bs = b.shape(&bkey, 1, &what)?;
        if bs[0] != out {
            return Err(b.err(format!(
                "`{bkey}` has shape {bs:?} but `{wkey}` has {out} output channels"
            )));
        }
        convs.push((i, stride, pad));
        cin = out;
        prev = format!("`{wkey}`");
    }
    Ok(Plan { net, convs })
}

/// Checks the linear layers against the backbone's channel counts at the taps.
fn check_lins(l: &Listing<'_>, b: &Listing<'_>, net: Net) -> Result<(), Error> {
    if !l.shapes.keys().any(|k| k.starts_with("lin"))
        && l.shapes.keys().any(|k| k.starts_with("features."))
    {
        return Err(l.err(format!(
            "no `lin*` tensors but `features.*` ones: this looks like a backbone, not lpips's \
             linear-layer weights (`{}` ...)",
            lin_key(0)
        )));
    }
    for (k, conv) in tap_convs(net).into_iter().enumerate() {
        let key = lin_key(k);
        let s = l.shape(&key, 4, "an lpips v0.1 linear layer, [1, C, 1, 1]")?;
        let wkey = format!("features.{conv}.weight");
        let c = b.shapes[&wkey][0];
        if s[0] != 1 || s[2] != 1 || s[3] != 1 {
            return Err(l.err(format!("`{key}` has shape {s:?}, expected [1, {c}, 1, 1]")));
        }
        if s[1] != c {
            return Err(Error::Weights {
                path: l.path.to_path_buf(),
                message: format!(
                    "`{key}` has {} channels but layer {k} of the backbone `{}` (`{wkey}`) has {c}: \
                     the two files are for different networks",
                    s[1],
                    b.path.display()
                ),
            });
        }
    }
    Ok(())
}

fn name(net: Net) -> &'static str {
    match net {
        Net::Alex => "AlexNet",
        Net::Vgg => "VGG16",
    }
}

impl LpipsWeights {
    /// Reads the torchvision backbone (`features.*`; `classifier.*` is ignored) and lpips's linear
    /// layers from `.pth` (zip or legacy) or safetensors files. `net` is inferred from where the
    /// backbone's convolutions are when `None`. Channel counts and kernel sizes come from the
    /// shapes; the layout (keys, ranks, channels from layer to layer and between the backbone and
    /// the linear layers) is checked before any tensor data is read.
    pub fn load(backbone: &Path, lin: &Path, net: Option<Net>) -> Result<Self, Error> {
        let mut bf = TensorFile::open(backbone)?;
        let mut lf = TensorFile::open(lin)?;
        let listing = |f: &TensorFile, path| Listing {
            path,
            shapes: f
                .tensor_names()
                .into_iter()
                .map(|n| {
                    let s = f.shape(&n).expect("listed");
                    (n, s)
                })
                .collect(),
        };
        let (bl, ll) = (listing(&bf, backbone), listing(&lf, lin));
        let plan = plan_backbone(&bl, net)?;
        check_lins(&ll, &bl, plan.net)?;
        let mut convs = Vec::new();
        for &(index, stride, pad) in &plan.convs {
            convs.push(ConvWeights {
                index,
                weight: bf.read_tensor(&format!("features.{index}.weight"))?,
                bias: bf.read_tensor(&format!("features.{index}.bias"))?,
                stride,
                pad,
            });
        }
        let lins = (0..5)
            .map(|k| lf.read_tensor(&lin_key(k)))
            .collect::<Result<_, _>>()?;
        Ok(LpipsWeights {
            net: plan.net,
            convs,
            lins,
        })
    }

    /// The same checks on tensors in memory (e.g. randomly drawn test networks); errors name the
    /// pseudo-files `<backbone>` and `<lin>`.
    pub fn from_tensors(
        backbone: &BTreeMap<String, TensorF32>,
        lin: &BTreeMap<String, TensorF32>,
        net: Option<Net>,
    ) -> Result<Self, Error> {
        let (bp, lp) = (PathBuf::from("<backbone>"), PathBuf::from("<lin>"));
        let listing = |m: &BTreeMap<String, TensorF32>, path| Listing {
            path,
            shapes: m
                .iter()
                .map(|(k, t)| (k.clone(), t.shape.clone()))
                .collect(),
        };
        let (bl, ll) = (listing(backbone, &bp), listing(lin, &lp));
        let plan = plan_backbone(&bl, net)?;
        check_lins(&ll, &bl, plan.net)?;
        for (k, t) in backbone.iter().chain(lin) {
            if rust3r_torch_checkpoint::numel(&t.shape) != Some(t.data.len()) {
                return Err(Error::Input(format!(
                    "tensor `{k}` has shape {:?} but {} values",
                    t.shape,
                    t.data.len()
                )));
            }
        }
        Ok(LpipsWeights {
            net: plan.net,
            convs: plan
                .convs
                .iter()
                .map(|&(index, stride, pad)| ConvWeights {
                    index,
                    weight: backbone[&format!("features.{index}.weight")].clone(),
                    bias: backbone[&format!("features.{index}.bias")].clone(),
                    stride,
                    pad,
                })
                .collect(),
            lins: (0..5).map(|k| lin[&lin_key(k)].clone()).collect(),
        })
    }

    /// Whether the shapes are those of the released networks ([`Net::full_size_layout`]), i.e.
    /// whether the values are comparable with published LPIPS figures.
    pub fn is_full_size(&self) -> bool {
        let (backbone, lin) = self.net.full_size_layout();
        self.convs
            .iter()
            .all(|c| backbone.get(&format!("features.{}.weight", c.index)) == Some(&c.weight.shape))
            && self
                .lins
                .iter()
                .enumerate()
                .all(|(k, t)| lin.get(&lin_key(k)) == Some(&t.shape))
    }

    /// Channels of each tap (the lin layers' widths).
    pub fn tap_channels(&self) -> [usize; 5] {
        std::array::from_fn(|k| self.lins[k].shape[1])
    }

    /// The spatial size of each tap's features for an image of `height x width`, or an error
    /// naming the first layer the image is too small for.
    pub fn tap_sizes(&self, height: usize, width: usize) -> Result<[(usize, usize); 5], Error> {
        let mut size = (height, width);
        let mut out = [(0, 0); 5];
        let taps = self.net.taps();
        let mut convs = self.convs.iter();
        let mut tap = 0;
        for (i, op) in self.net.ops().iter().enumerate() {
            let (k, s, p, what) = match *op {
                Op::Conv { stride, pad } => {
                    let c = convs.next().expect("one weight per convolution");
                    (c.weight.shape[2], stride, pad, "convolution")
                }
                Op::Pool { kernel, stride } => (kernel, stride, 0, "max pool"),
                Op::Relu => (1, 1, 0, "relu"),
            };
            let (h, w) = (size.0 + 2 * p, size.1 + 2 * p);
            if h < k || w < k {
                return Err(Error::Input(format!(
                    "a {width}x{height} image is too small for LPIPS-{}: features.{i} ({what}, \
                     {k}x{k} window) gets {}x{}",
                    self.net, size.1, size.0
                )));
            }
            size = ((h - k) / s + 1, (w - k) / s + 1);
            if i + 1 == taps[tap] {
                out[tap] = size;
                tap += 1;
                if tap == 5 {
                    break;
                }
            }
        }
        Ok(out)
    }
}
