//! Host tensors and element-type decoding shared by the `.pth` and safetensors readers.

/// A dense, row-major (C-order) `f32` tensor on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorF32 {
    /// Size of each dimension, outermost first. Empty for a scalar.
    pub shape: Vec<usize>,
    /// `shape.iter().product()` values in row-major order.
    pub data: Vec<f32>,
}

impl TensorF32 {
    /// Builds a tensor, or returns `None` when `data.len()` is not the product of `shape`.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Option<Self> {
        (numel(&shape) == Some(data.len())).then_some(TensorF32 { shape, data })
    }

    /// Number of elements (product of the shape).
    pub fn numel(&self) -> usize {
        self.data.len()
    }
}

/// Product of a shape, or `None` on overflow.
pub fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Element types a stored tensor may have; all are converted to `f32` when read.
///
/// Integers and booleans convert exactly while they fit `f32`'s 24-bit mantissa.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// IEEE binary64.
    F64,
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 64-bit integer.
    I64,
    /// Signed 32-bit integer.
    I32,
    /// Signed 16-bit integer.
    I16,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Boolean stored as one byte (0 or 1).
    Bool,
}

impl ElementType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElementType::F64 | ElementType::I64 => 8,
            ElementType::F32 | ElementType::I32 => 4,
            ElementType::F16 | ElementType::BF16 | ElementType::I16 => 2,
            ElementType::I8 | ElementType::U8 | ElementType::Bool => 1,
        }
    }

    /// Decodes `bytes` (a whole number of elements) and appends the values to `out`.
    pub(crate) fn decode_into(self, bytes: &[u8], little_endian: bool, out: &mut Vec<f32>) {
        macro_rules! conv {
            ($n:literal, |$b:ident| $e:expr) => {
                out.extend(bytes.chunks_exact($n).map(|c| {
                    let mut $b: [u8; $n] = c.try_into().expect("chunk size");
                    if !little_endian {
                        $b.reverse();
                    }
                    $e
                }))
            };
        }
        match self {
            ElementType::F32 => conv!(4, |b| f32::from_le_bytes(b)),
            ElementType::F64 => conv!(8, |b| f64::from_le_bytes(b) as f32),
            ElementType::F16 => conv!(2, |b| half::f16::from_le_bytes(b).to_f32()),
            ElementType::BF16 => conv!(2, |b| half::bf16::from_le_bytes(b).to_f32()),
            ElementType::I64 => conv!(8, |b| i64::from_le_bytes(b) as f32),
            ElementType::I32 => conv!(4, |b| i32::from_le_bytes(b) as f32),
            ElementType::I16 => conv!(2, |b| i16::from_le_bytes(b) as f32),
            ElementType::I8 => out.extend(bytes.iter().map(|&b| b as i8 as f32)),
            ElementType::U8 => out.extend(bytes.iter().map(|&b| b as f32)),
            ElementType::Bool => out.extend(bytes.iter().map(|&b| if b != 0 { 1.0 } else { 0.0 })),
        }
    }
}

/// A `Vec` with capacity for `n` elements, or an error message instead of an allocation abort.
pub fn try_vec<T>(n: usize) -> Result<Vec<T>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| format!("cannot allocate {n} elements"))?;
    Ok(v)
}
