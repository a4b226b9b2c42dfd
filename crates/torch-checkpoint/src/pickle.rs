//! A small, safe interpreter for the subset of Python pickle that `torch.save` emits.
//!
//! Nothing is ever imported or executed: `GLOBAL`/`STACK_GLOBAL` resolve only names on a fixed
//! allow-list to built-in stand-ins (tensor rebuilders, storage and tensor types,
//! `collections.OrderedDict`, `argparse.Namespace`, `torch.device`); any other global is an error
//! naming it.
//!
//! Tensors come in the three shapes `torch.save` has written over the years:
//! `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])`
//! (PyTorch >= 0.4), `torch._utils._rebuild_tensor(storage, offset, size, stride)` (0.2-0.3), and a
//! tensor class (`torch.FloatTensor` ...) instantiated without arguments and given the state
//! `(storage, offset, size, stride)` by `BUILD` (0.1.x, the `__setstate__` PyTorch still honours).
//! Storages are persistent ids `('storage', torch.<Type>Storage, key, location, numel)`, with a
//! sixth element `view_metadata` (always `None` in practice) in the legacy format.
//!
//! Objects live in an arena and values refer to them by index, so shared and mutated containers
//! behave as in Python (identity is preserved through the memo), reference cycles are harmless and
//! nothing is dropped recursively: a hostile pickle can neither overflow the stack nor leak.
//! Every length is checked against the remaining input before anything is allocated.

use std::collections::HashMap;
use std::rc::Rc;

use crate::error::{PickleError, PickleErrorKind};
use crate::tensor::ElementType;

/// A value on the pickle stack or in the memo.
#[derive(Clone, Debug)]
#[allow(
    dead_code,
    reason = "bool/float payloads are parsed faithfully but only inspected via Debug"
)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    /// An integer wider than 64 bits (`LONG1` with more than 8 bytes), as little-endian two's
    /// complement bytes; the legacy format's magic number is one.
    BigInt(Rc<[u8]>),
    Global(Global),
    /// A `bytes`/`bytearray` value: where its bytes are.
    Bytes(ByteSrc),
    /// Index into [`Pickled::arena`].
    Obj(usize),
}

/// Where the bytes of a `bytes` value are: a range of the pickle's own input (no copy, so a
/// large numpy array is not duplicated), or owned (made by `_codecs.encode`, protocol 2).
#[derive(Clone, Debug)]
pub(crate) enum ByteSrc {
    Input { start: usize, len: usize },
    Owned(Rc<[u8]>),
}

impl ByteSrc {
    /// The bytes, given the pickle's input.
    pub fn get<'a>(&'a self, input: &'a [u8]) -> &'a [u8] {
        match self {
            ByteSrc::Input { start, len } => &input[*start..*start + *len],
            ByteSrc::Owned(b) => b,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            ByteSrc::Input { len, .. } => *len,
            ByteSrc::Owned(b) => b.len(),
        }
    }
}

/// The callables/classes a pickle may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Global {
    RebuildTensorV2,
    /// `torch._utils._rebuild_tensor` (PyTorch 0.2-0.3).
    RebuildTensor,
    RebuildParameter,
    Storage(ElementType),
    /// A tensor class such as `torch.FloatTensor` (PyTorch 0.1.x pickles).
    TensorClass(ElementType),
    OrderedDict,
    Namespace,
    Device,
    /// `numpy.core.multiarray._reconstruct` (also `numpy._core`, numpy 2): an empty array that
    /// `BUILD` fills (pickle protocols 2-4).
    NdReconstruct,
    /// `numpy.ndarray`, the class `_reconstruct` is given.
    NdArrayType,
    /// `numpy.dtype`.
    NdDtype,
    /// `numpy.core.numeric._frombuffer` (also `numpy._core`): protocol 5's in-band arrays.
    NdFromBuffer,
    /// `_codecs.encode(str, 'latin1')`: how protocol 2 writes `bytes`.
    CodecsEncode,
}

/// A numpy dtype: its element type and byte order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct NdDtype {
    pub elem: ElementType,
    pub little_endian: bool,
}

/// A numpy array: element type, shape, memory order and where its bytes are.
#[derive(Clone, Debug)]
pub(crate) struct NdArrayRef {
    pub dtype: NdDtype,
    pub shape: Vec<usize>,
    pub fortran: bool,
    pub data: ByteSrc,
}

/// A storage reference from a persistent id `('storage', torch.XStorage, key, location, numel)`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StorageRef {
    pub dtype: ElementType,
    pub key: String,
    pub numel: usize,
}

/// The arguments of `torch._utils._rebuild_tensor_v2`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TensorRef {
    pub storage: StorageRef,
    pub offset: usize,
    pub shape: Vec<usize>,
    pub stride: Vec<usize>,
}

/// Heap objects.
#[derive(Debug)]
#[allow(
    dead_code,
    reason = "device names are parsed faithfully but only inspected via Debug"
)]
pub(crate) enum Obj {
    List(Vec<Value>),
    Tuple(Vec<Value>),
    /// `dict` or `collections.OrderedDict`; items in insertion order, duplicates allowed (the
    /// last one wins, as reading code resolves them).
    Dict(Vec<(Value, Value)>),
    /// `argparse.Namespace` attributes.
    Namespace(Vec<(Value, Value)>),
    Storage(StorageRef),
    Tensor(TensorRef),
    /// A tensor class instantiated without arguments, waiting for its `BUILD` state.
    PendingTensor(ElementType),
    Device(String),
    NdDtype(NdDtype),
    /// `_reconstruct`'s empty array, waiting for its `BUILD` state.
    PendingNdArray,
    NdArray(NdArrayRef),
}

/// The result of running a pickle: the returned value and the objects it refers to.
#[derive(Debug)]
pub(crate) struct Pickled {
    pub arena: Vec<Obj>,
    pub root: Value,
}

impl Pickled {
    pub fn obj(&self, v: &Value) -> Option<&Obj> {
        match v {
            Value::Obj(i) => self.arena.get(*i),
            _ => None,
        }
    }

    /// The items of a dict/OrderedDict value, or the attributes of a Namespace.
    pub fn mapping(&self, v: &Value) -> Option<&[(Value, Value)]> {
        match self.obj(v)? {
            Obj::Dict(items) | Obj::Namespace(items) => Some(items),
            _ => None,
        }
    }

    /// Looks up a string key in a dict/Namespace (the last assignment wins).
    pub fn get<'a>(&'a self, v: &Value, key: &str) -> Option<&'a Value> {
        self.mapping(v)?
            .iter()
            .rev()
            .find(|(k, _)| matches!(k, Value::Str(s) if &**s == key))
            .map(|(_, v)| v)
    }

    /// A short description of a value's type for error messages (never recursive).
    pub fn kind(&self, v: &Value) -> &'static str {
        match v {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::Global(_) => "class/function",
            Value::Obj(_) => match self.obj(v) {
                Some(Obj::List(_)) => "list",
                Some(Obj::Tuple(_)) => "tuple",
                Some(Obj::Dict(_)) => "dict",
                Some(Obj::Namespace(_)) => "argparse.Namespace",
                Some(Obj::Storage(_)) => "storage",
                Some(Obj::Tensor(_)) => "tensor",
                Some(Obj::PendingTensor(_)) => "tensor without state",
                Some(Obj::Device(_)) => "torch.device",
                Some(Obj::NdDtype(_)) => "numpy.dtype",
                Some(Obj::PendingNdArray) => "numpy.ndarray without state",
                Some(Obj::NdArray(_)) => "numpy.ndarray",
                None => "invalid object",
            },
        }
    }
}

/// Runs `data` as a pickle program and returns what it built (bytes after `STOP` are ignored).
pub(crate) fn unpickle(data: &[u8]) -> Result<Pickled, PickleError> {
    unpickle_prefix(data).map(|(p, _)| p)
}

/// Runs the pickle program at the start of `data` and returns what it built and the number of
/// bytes it took, up to and including its `STOP` (the legacy format writes several pickles one
/// after the other).
pub(crate) fn unpickle_prefix(data: &[u8]) -> Result<(Pickled, usize), PickleError> {
    let mut vm = Vm {
        data,
        pos: 0,
        op_pos: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        arena: Vec::new(),
    };
    let root = vm.run()?;
    let used = vm.pos;
    Ok((
        Pickled {
            arena: vm.arena,
            root,
        },
        used,
    ))
}

struct Vm<'a> {
    data: &'a [u8],
    pos: usize,
    op_pos: usize,
    stack: Vec<Value>,
    /// Stack heights at each `MARK`.
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
    arena: Vec<Obj>,
}

type R<T> = Result<T, PickleError>;

impl Vm<'_> {
    fn err<T>(&self, kind: PickleErrorKind) -> R<T> {
        Err(PickleError {
            offset: self.op_pos,
            kind,
        })
    }

    fn invalid<T>(&self, msg: impl Into<String>) -> R<T> {
        self.err(PickleErrorKind::Invalid(msg.into()))
    }

    fn bytes(&mut self, n: usize) -> R<&[u8]> {
        let end = match self.pos.checked_add(n) {
            Some(end) if end <= self.data.len() => end,
            _ => return self.err(PickleErrorKind::Truncated),
        };
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> R<[u8; N]> {
        Ok(self.bytes(N)?.try_into().expect("length checked"))
    }

    fn u8(&mut self) -> R<u8> {
        Ok(self.array::<1>()?[0])
    }

    fn line(&mut self) -> R<&str> {
        let rest = &self.data[self.pos..];
        let Some(n) = rest.iter().position(|&b| b == b'\n') else {
            return self.err(PickleErrorKind::Truncated);
        };
        self.pos += n + 1;
        match std::str::from_utf8(&rest[..n]) {
            Ok(s) => Ok(s),
            Err(_) => self.invalid("text argument is not UTF-8"),
        }
    }

    fn string(&mut self, n: usize) -> R<Value> {
        let b = self.bytes(n)?;
        match std::str::from_utf8(b) {
            Ok(s) => Ok(Value::Str(Rc::from(s))),
            Err(_) => self.invalid("string is not valid UTF-8"),
        }
    }

    fn new_obj(&mut self, obj: Obj) -> Value {
        self.arena.push(obj);
        Value::Obj(self.arena.len() - 1)
    }

    fn frame_base(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self) -> R<Value> {
        if self.stack.len() <= self.frame_base() {
            return self.invalid("stack underflow");
        }
        Ok(self.stack.pop().expect("non-empty"))
    }

    fn pop_mark(&mut self) -> R<Vec<Value>> {
        let Some(base) = self.marks.pop() else {
            return self.invalid("no MARK on the stack");
        };
        Ok(self.stack.split_off(base))
    }

    fn top_obj(&mut self) -> R<usize> {
        if self.stack.len() <= self.frame_base() {
            return self.invalid("stack underflow");
        }
        match self.stack.last() {
            Some(Value::Obj(i)) => Ok(*i),
            _ => self.invalid("expected a container on the stack"),
        }
    }

    fn memo_put(&mut self, idx: u32) -> R<()> {
        if self.stack.len() <= self.frame_base() {
            return self.invalid("PUT with an empty stack");
        }
        let v = self.stack.last().expect("non-empty").clone();
        self.memo.insert(idx, v);
        Ok(())
    }

    fn memo_get(&mut self, idx: u32) -> R<()> {
        match self.memo.get(&idx) {
            Some(v) => {
                let v = v.clone();
                self.stack.push(v);
                Ok(())
            }
            None => self.invalid(format!("memo key {idx} was never stored")),
        }
    }

    fn tuple_items(&self, v: &Value) -> Option<&[Value]> {
        match v {
            Value::Obj(i) => match self.arena.get(*i)? {
                Obj::Tuple(items) => Some(items),
                _ => None,
            },
            _ => None,
        }
    }

    fn resolve_global(&self, module: &str, name: &str) -> R<Global> {
        let g = match (module, name) {
            ("torch._utils", "_rebuild_tensor_v2") => Global::RebuildTensorV2,
            ("torch._utils", "_rebuild_tensor") => Global::RebuildTensor,
            ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
            ("collections", "OrderedDict") => Global::OrderedDict,
            ("argparse", "Namespace") => Global::Namespace,
            ("torch", "device") => Global::Device,
            ("numpy.core.multiarray" | "numpy._core.multiarray", "_reconstruct") => {
                Global::NdReconstruct
            }
            ("numpy", "ndarray") => Global::NdArrayType,
            ("numpy", "dtype") => Global::NdDtype,
            ("numpy.core.numeric" | "numpy._core.numeric", "_frombuffer") => Global::NdFromBuffer,
            ("_codecs", "encode") => Global::CodecsEncode,
            ("torch", "DoubleStorage") => Global::Storage(ElementType::F64),
            ("torch", "FloatStorage") => Global::Storage(ElementType::F32),
            ("torch", "HalfStorage") => Global::Storage(ElementType::F16),
            ("torch", "BFloat16Storage") => Global::Storage(ElementType::BF16),
            ("torch", "LongStorage") => Global::Storage(ElementType::I64),
            ("torch", "IntStorage") => Global::Storage(ElementType::I32),
            ("torch", "ShortStorage") => Global::Storage(ElementType::I16),
            ("torch", "CharStorage") => Global::Storage(ElementType::I8),
            ("torch", "ByteStorage") => Global::Storage(ElementType::U8),
            ("torch", "BoolStorage") => Global::Storage(ElementType::Bool),
            ("torch", "DoubleTensor") => Global::TensorClass(ElementType::F64),
            ("torch", "FloatTensor") => Global::TensorClass(ElementType::F32),
            ("torch", "HalfTensor") => Global::TensorClass(ElementType::F16),
            ("torch", "LongTensor") => Global::TensorClass(ElementType::I64),
            ("torch", "IntTensor") => Global::TensorClass(ElementType::I32),
            ("torch", "ShortTensor") => Global::TensorClass(ElementType::I16),
            ("torch", "CharTensor") => Global::TensorClass(ElementType::I8),
            ("torch", "ByteTensor") => Global::TensorClass(ElementType::U8),
            _ => {
                return self.err(PickleErrorKind::ForbiddenGlobal {
                    module: truncate(module),
                    name: truncate(name),
                });
            }
        };
        Ok(g)
    }

    fn usize_arg(&self, v: &Value, what: &str) -> R<usize> {
        match v {
            Value::Int(i) if *i >= 0 => {
                usize::try_from(*i).or_else(|_| self.invalid(format!("{what} too large")))
            }
            _ => self.invalid(format!("{what} must be a non-negative int")),
        }
    }

    fn usize_tuple(&self, v: &Value, what: &str) -> R<Vec<usize>> {
        let Some(items) = self.tuple_items(v) else {
            return self.invalid(format!("{what} must be a tuple of ints"));
        };
        items.iter().map(|x| self.usize_arg(x, what)).collect()
    }

    /// `(storage, storage_offset, size, stride)`, the first four arguments of every tensor
    /// rebuilder and the state of a 0.1.x tensor.
    fn tensor_ref(&self, a: &[Value], what: &str) -> R<TensorRef> {
        let storage = match &a[0] {
            Value::Obj(i) => match self.arena.get(*i) {
                Some(Obj::Storage(s)) => s.clone(),
                _ => return self.invalid(format!("{what}: first argument is not a storage")),
            },
            _ => return self.invalid(format!("{what}: first argument is not a storage")),
        };
        let offset = self.usize_arg(&a[1], "storage offset")?;
        let shape = self.usize_tuple(&a[2], "tensor size")?;
        let stride = self.usize_tuple(&a[3], "tensor stride")?;
        if shape.len() != stride.len() {
            return self.invalid(format!(
                "tensor size has {} dims but stride has {}",
                shape.len(),
                stride.len()
            ));
        }
        Ok(TensorRef {
            storage,
            offset,
            shape,
            stride,
        })
    }

    /// `REDUCE`: calls an allowed global with a tuple of arguments.
    fn call(&mut self, f: Global, args: &Value) -> R<Value> {
        let Some(a) = self.tuple_items(args) else {
            return self.invalid("REDUCE arguments are not a tuple");
        };
        match f {
            Global::RebuildTensorV2 => {
                // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
                if a.len() != 6 && a.len() != 7 {
                    return self.invalid(format!(
                        "_rebuild_tensor_v2 takes 6 or 7 arguments, got {}",
                        a.len()
                    ));
                }
                let t = self.tensor_ref(a, "_rebuild_tensor_v2")?;
                Ok(self.new_obj(Obj::Tensor(t)))
            }
            Global::RebuildTensor => {
                // (storage, storage_offset, size, stride)
                if a.len() != 4 {
                    return self.invalid(format!(
                        "_rebuild_tensor takes 4 arguments, got {}",
                        a.len()
                    ));
                }
                let t = self.tensor_ref(a, "_rebuild_tensor")?;
                Ok(self.new_obj(Obj::Tensor(t)))
            }
            Global::TensorClass(dtype) => {
                if !a.is_empty() {
                    return self.invalid(
                        "tensor classes (torch.FloatTensor ...) are only supported without arguments",
                    );
                }
                Ok(self.new_obj(Obj::PendingTensor(dtype)))
            }
            Global::RebuildParameter => {
                // (data, requires_grad, backward_hooks)
                if a.len() != 3 {
                    return self.invalid(format!(
                        "_rebuild_parameter takes 3 arguments, got {}",
                        a.len()
                    ));
                }
                match &a[0] {
                    v @ Value::Obj(i) if matches!(self.arena.get(*i), Some(Obj::Tensor(_))) => {
                        Ok(v.clone())
                    }
                    _ => self.invalid("_rebuild_parameter: first argument is not a tensor"),
                }
            }
            Global::OrderedDict => {
                if !a.is_empty() {
                    return self
                        .invalid("collections.OrderedDict is only supported without arguments");
                }
                Ok(self.new_obj(Obj::Dict(Vec::new())))
            }
            Global::Namespace => {
                if !a.is_empty() {
                    return self.invalid("argparse.Namespace is only supported without arguments");
                }
                Ok(self.new_obj(Obj::Namespace(Vec::new())))
            }
            Global::Device => {
                let desc = match a {
                    [Value::Str(s)] => s.to_string(),
                    [Value::Str(s), Value::Int(i)] => format!("{s}:{i}"),
                    _ => return self.invalid("torch.device takes (str) or (str, int)"),
                };
                Ok(self.new_obj(Obj::Device(desc)))
            }
            Global::Storage(_) => self.invalid("storage types cannot be called"),
            Global::NdArrayType => {
                self.invalid("numpy.ndarray is only supported through _reconstruct")
            }
            Global::NdReconstruct => match a {
                [Value::Global(Global::NdArrayType), _, _] => Ok(self.new_obj(Obj::PendingNdArray)),
                _ => self.invalid("_reconstruct takes (numpy.ndarray, shape, typecode)"),
            },
            Global::NdDtype => {
                // numpy.dtype(code, align=False, copy=True); the byte order comes with BUILD.
                let [Value::Str(code), ..] = a else {
                    return self.invalid("numpy.dtype takes a type code string");
                };
                let elem = self.nd_elem(code)?;
                Ok(self.new_obj(Obj::NdDtype(NdDtype {
                    elem,
                    little_endian: true,
                })))
            }
            Global::NdFromBuffer => {
                // _frombuffer(buffer, dtype, shape, order)
                let [Value::Bytes(data), dtype, shape, Value::Str(order)] = a else {
                    return self.invalid("_frombuffer takes (bytes, dtype, shape, order)");
                };
                let dtype = self.nd_dtype(dtype)?;
                let shape = self.usize_tuple(shape, "array shape")?;
                let fortran = match &**order {
                    "C" => false,
                    "F" => true,
                    o => return self.invalid(format!("_frombuffer: unknown order '{o}'")),
                };
                let arr = self.nd_array(dtype, shape, fortran, data.clone())?;
                Ok(self.new_obj(Obj::NdArray(arr)))
            }
            Global::CodecsEncode => match a {
                [Value::Str(s), Value::Str(enc)] if &**enc == "latin1" => {
                    let mut out = Vec::with_capacity(s.len());
                    for c in s.chars() {
                        let Ok(b) = u8::try_from(u32::from(c)) else {
                            return self.invalid("_codecs.encode: character outside latin-1");
                        };
                        out.push(b);
                    }
                    Ok(Value::Bytes(ByteSrc::Owned(Rc::from(out))))
                }
                _ => self.invalid("_codecs.encode is only supported as encode(str, 'latin1')"),
            },
        }
    }

    /// The element type of a numpy type code (`f4`, `<f4`, ...).
    fn nd_elem(&self, code: &str) -> R<ElementType> {
        let c = code.trim_start_matches(['<', '>', '=', '|']);
        Ok(match c {
            "f8" => ElementType::F64,
            "f4" => ElementType::F32,
            "f2" => ElementType::F16,
            "i8" => ElementType::I64,
            "i4" => ElementType::I32,
            "i2" => ElementType::I16,
            "i1" => ElementType::I8,
            "u1" => ElementType::U8,
            "b1" => ElementType::Bool,
            _ => {
                return self.invalid(format!(
                    "numpy dtype '{}' is not supported (only f8 f4 f2 i8 i4 i2 i1 u1 b1)",
                    truncate(code)
                ));
            }
        })
    }

    fn nd_dtype(&self, v: &Value) -> R<NdDtype> {
        match self.obj_at(v) {
            Some(Obj::NdDtype(d)) => Ok(*d),
            _ => self.invalid("expected a numpy.dtype"),
        }
    }

    fn obj_at(&self, v: &Value) -> Option<&Obj> {
        match v {
            Value::Obj(i) => self.arena.get(*i),
            _ => None,
        }
    }

    /// A numpy array whose byte count must be exactly `prod(shape) * itemsize`.
    fn nd_array(
        &self,
        dtype: NdDtype,
        shape: Vec<usize>,
        fortran: bool,
        data: ByteSrc,
    ) -> R<NdArrayRef> {
        let bytes = crate::tensor::numel(&shape).and_then(|n| n.checked_mul(dtype.elem.size()));
        if bytes != Some(data.len()) {
            return self.invalid(format!(
                "numpy array of shape {shape:?} and type {:?} needs {bytes:?} bytes but has {}",
                dtype.elem,
                data.len()
            ));
        }
        Ok(NdArrayRef {
            dtype,
            shape,
            fortran,
            data,
        })
    }

    /// `BINPERSID`: `('storage', torch.XStorage, key, location, numel)` (zip format) or the same
    /// with a sixth element `view_metadata`, which must be `None` (legacy format).
    fn persistent_load(&mut self, pid: &Value) -> R<Value> {
        let Some(items) = self.tuple_items(pid) else {
            return self.invalid("persistent id is not a tuple");
        };
        let (head, view) = match items.len() {
            5 => (items, None),
            6 => (&items[..5], Some(&items[5])),
            _ => (&items[..0], None),
        };
        if let Some(v) = view
            && !matches!(v, Value::None)
        {
            return self.invalid(
                "storage persistent id has view metadata: storage views are not supported",
            );
        }
        let (dtype, key, numel) = match head {
            [
                Value::Str(tag),
                Value::Global(Global::Storage(dtype)),
                Value::Str(key),
                Value::Str(_location),
                numel,
            ] if &**tag == "storage" => (
                *dtype,
                key.to_string(),
                self.usize_arg(numel, "storage numel")?,
            ),
            _ => {
                return self.invalid(
                    "persistent id is not ('storage', torch.<Type>Storage, key, location, numel[, None])",
                );
            }
        };
        Ok(self.new_obj(Obj::Storage(StorageRef { dtype, key, numel })))
    }

    fn run(&mut self) -> R<Value> {
        loop {
            self.op_pos = self.pos;
            let op = self.u8()?;
            match op {
                // PROTO
                0x80 => {
                    let p = self.u8()?;
                    if !(2..=5).contains(&p) {
                        return self.err(PickleErrorKind::UnsupportedProtocol(p));
                    }
                }
                // FRAME: a length hint only.
                0x95 => {
                    self.bytes(8)?;
                }
                b'.' => {
                    // STOP
                    return self.pop();
                }
                b'}' => {
                    let v = self.new_obj(Obj::Dict(Vec::new()));
                    self.stack.push(v);
                }
                b']' => {
                    let v = self.new_obj(Obj::List(Vec::new()));
                    self.stack.push(v);
                }
                b')' => {
                    let v = self.new_obj(Obj::Tuple(Vec::new()));
                    self.stack.push(v);
                }
                b'(' => self.marks.push(self.stack.len()),
                // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
                b'X' => {
                    let n = u32::from_le_bytes(self.array()?) as usize;
                    let v = self.string(n)?;
                    self.stack.push(v);
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    let v = self.string(n)?;
                    self.stack.push(v);
                }
                0x8d => {
                    let n = u64::from_le_bytes(self.array()?);
                    let n = usize::try_from(n).unwrap_or(usize::MAX);
                    let v = self.string(n)?;
                    self.stack.push(v);
                }
                // SHORT_BINSTRING, BINSTRING: Python 2 `str`, decoded as UTF-8 (what torch.load
                // does with its default `encoding='utf-8'`).
                b'U' => {
                    let n = self.u8()? as usize;
                    let v = self.string(n)?;
                    self.stack.push(v);
                }
                b'T' => {
                    let n = i32::from_le_bytes(self.array()?);
                    let Ok(n) = usize::try_from(n) else {
                        return self.invalid("BINSTRING with a negative length");
                    };
                    let v = self.string(n)?;
                    self.stack.push(v);
                }
                // SHORT_BINBYTES, BINBYTES, BINBYTES8, BYTEARRAY8: kept as a range of the input.
                b'C' | b'B' | 0x8e | 0x96 => {
                    let n = match op {
                        b'C' => self.u8()? as usize,
                        b'B' => u32::from_le_bytes(self.array()?) as usize,
                        _ => {
                            usize::try_from(u64::from_le_bytes(self.array()?)).unwrap_or(usize::MAX)
                        }
                    };
                    let start = self.pos;
                    self.bytes(n)?;
                    self.stack
                        .push(Value::Bytes(ByteSrc::Input { start, len: n }));
                }
                // NEXT_BUFFER, READONLY_BUFFER: out-of-band buffers are not in the file.
                0x97 | 0x98 => {
                    return self.invalid(
                        "out-of-band pickle buffers (protocol 5 NEXT_BUFFER) are not in the file",
                    );
                }
                // BINPUT, LONG_BINPUT, MEMOIZE
                b'q' => {
                    let i = self.u8()? as u32;
                    self.memo_put(i)?;
                }
                b'r' => {
                    let i = u32::from_le_bytes(self.array()?);
                    self.memo_put(i)?;
                }
                0x94 => {
                    let i = u32::try_from(self.memo.len()).unwrap_or(u32::MAX);
                    self.memo_put(i)?;
                }
                // BINGET, LONG_BINGET
                b'h' => {
                    let i = self.u8()? as u32;
                    self.memo_get(i)?;
                }
                b'j' => {
                    let i = u32::from_le_bytes(self.array()?);
                    self.memo_get(i)?;
                }
                // BININT, BININT1, BININT2, LONG1
                b'J' => {
                    let v = i32::from_le_bytes(self.array()?);
                    self.stack.push(Value::Int(v as i64));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.stack.push(Value::Int(v as i64));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.array()?);
                    self.stack.push(Value::Int(v as i64));
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    let b = self.bytes(n)?;
                    if n > MAX_BIGINT_BYTES {
                        return self.invalid(format!("LONG1 integer of {n} bytes is too large"));
                    }
                    if n > 8 {
                        let v = Value::BigInt(Rc::from(b));
                        self.stack.push(v);
                        continue;
                    }
                    let mut v: i64 = 0;
                    for (k, &byte) in b.iter().enumerate() {
                        v |= (byte as i64) << (8 * k);
                    }
                    if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
                        v -= 1i64 << (8 * n); // sign-extend two's complement
                    }
                    self.stack.push(Value::Int(v));
                }
                // BINFLOAT (big-endian)
                b'G' => {
                    let v = f64::from_be_bytes(self.array()?);
                    self.stack.push(Value::Float(v));
                }
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'N' => self.stack.push(Value::None),
                // TUPLE, TUPLE1..3
                b't' => {
                    let items = self.pop_mark()?;
                    let v = self.new_obj(Obj::Tuple(items));
                    self.stack.push(v);
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    let v = self.new_obj(Obj::Tuple(items));
                    self.stack.push(v);
                }
                // SETITEM, SETITEMS
                b's' => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    let d = self.top_obj()?;
                    match &mut self.arena[d] {
                        Obj::Dict(items) => items.push((key, value)),
                        _ => return self.invalid("SETITEM on something that is not a dict"),
                    }
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return self.invalid("SETITEMS with an odd number of items");
                    }
                    let d = self.top_obj()?;
                    let Obj::Dict(dict) = &mut self.arena[d] else {
                        return self.invalid("SETITEMS on something that is not a dict");
                    };
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        dict.push((k, v));
                    }
                }
                // APPEND, APPENDS
                b'a' => {
                    let value = self.pop()?;
                    let l = self.top_obj()?;
                    match &mut self.arena[l] {
                        Obj::List(items) => items.push(value),
                        _ => return self.invalid("APPEND on something that is not a list"),
                    }
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let l = self.top_obj()?;
                    match &mut self.arena[l] {
                        Obj::List(list) => list.extend(items),
                        _ => return self.invalid("APPENDS on something that is not a list"),
                    }
                }
                // GLOBAL, STACK_GLOBAL
                b'c' => {
                    let module = self.line()?.to_string();
                    let name = self.line()?.to_string();
                    let g = self.resolve_global(&module, &name)?;
                    self.stack.push(Value::Global(g));
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Value::Str(module), Value::Str(name)) = (module, name) else {
                        return self.invalid("STACK_GLOBAL needs two strings");
                    };
                    let g = self.resolve_global(&module, &name)?;
                    self.stack.push(Value::Global(g));
                }
                // REDUCE, NEWOBJ
                b'R' => {
                    let args = self.pop()?;
                    let f = self.pop()?;
                    let Value::Global(g) = f else {
                        return self.invalid("REDUCE on something that is not an allowed global");
                    };
                    let v = self.call(g, &args)?;
                    self.stack.push(v);
                }
                0x81 => {
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let v = match cls {
                        Value::Global(
                            g @ (Global::OrderedDict | Global::Namespace | Global::TensorClass(_)),
                        ) => self.call(g, &args)?,
                        _ => {
                            return self.invalid(
                                "NEWOBJ is only supported for OrderedDict, Namespace and tensor classes",
                            );
                        }
                    };
                    self.stack.push(v);
                }
                // BUILD
                b'b' => {
                    let state = self.pop()?;
                    let target = self.top_obj()?;
                    if let Obj::PendingTensor(dtype) = self.arena[target] {
                        // A 0.1.x tensor: the state is (storage, offset, size, stride).
                        let t = match self.tuple_items(&state) {
                            Some(a) if a.len() == 4 => self.tensor_ref(a, "tensor state")?,
                            _ => {
                                return self.invalid(
                                    "tensor state is not (storage, offset, size, stride)",
                                );
                            }
                        };
                        if t.storage.dtype != dtype {
                            return self.invalid(format!(
                                "a {dtype:?} tensor class built on a {:?} storage",
                                t.storage.dtype
                            ));
                        }
                        self.arena[target] = Obj::Tensor(t);
                        continue;
                    }
                    if let Obj::NdDtype(d) = self.arena[target] {
                        // (version, byteorder, subarray, names, fields, elsize, alignment, flags)
                        let order = match self.tuple_items(&state) {
                            Some([_, Value::Str(o), Value::None, Value::None, Value::None, ..]) => {
                                o.clone()
                            }
                            _ => return self.invalid(
                                "numpy.dtype state is not (version, byteorder, None, None, None, ...): structured dtypes are not supported",
                            ),
                        };
                        let little_endian = match &*order {
                            "<" | "|" | "=" => true,
                            ">" => false,
                            o => return self.invalid(format!("numpy.dtype byte order '{o}'")),
                        };
                        self.arena[target] = Obj::NdDtype(NdDtype { little_endian, ..d });
                        continue;
                    }
                    if let Obj::PendingNdArray = self.arena[target] {
                        // (version 1, shape, dtype, is_fortran, raw bytes)
                        let arr = match self.tuple_items(&state) {
                            Some(
                                [
                                    Value::Int(1),
                                    shape,
                                    dtype,
                                    Value::Bool(fortran),
                                    Value::Bytes(data),
                                ],
                            ) => {
                                let dtype = self.nd_dtype(dtype)?;
                                let shape = self.usize_tuple(shape, "array shape")?;
                                self.nd_array(dtype, shape, *fortran, data.clone())?
                            }
                            Some([Value::Int(1), _, _, _, _]) => {
                                return self.invalid(
                                    "numpy array data is not raw bytes (object arrays are not supported)",
                                );
                            }
                            _ => {
                                return self.invalid(
                                    "numpy array state is not (1, shape, dtype, is_fortran, bytes)",
                                );
                            }
                        };
                        self.arena[target] = Obj::NdArray(arr);
                        continue;
                    }
                    let state_items = match &state {
                        Value::None => Vec::new(),
                        Value::Obj(i) => match &self.arena[*i] {
                            Obj::Dict(items) => items.clone(),
                            _ => return self.invalid("BUILD state is not a dict"),
                        },
                        _ => return self.invalid("BUILD state is not a dict"),
                    };
                    match &mut self.arena[target] {
                        // Attributes of an OrderedDict (the state dict's `_metadata`) are not needed.
                        Obj::Dict(_) => {}
                        Obj::Namespace(attrs) => attrs.extend(state_items),
                        _ => {
                            return self
                                .invalid("BUILD is only supported on OrderedDict and Namespace");
                        }
                    }
                }
                // BINPERSID, PERSID
                b'Q' => {
                    let pid = self.pop()?;
                    let v = self.persistent_load(&pid)?;
                    self.stack.push(v);
                }
                b'P' => {
                    self.line()?;
                    return self.invalid("text persistent ids (PERSID) are not torch storages");
                }
                other => return self.err(PickleErrorKind::UnsupportedOpcode(other)),
            }
        }
    }
}

/// Widest `LONG1` integer accepted (the legacy magic number takes 10 bytes).
const MAX_BIGINT_BYTES: usize = 64;

/// Keeps hostile names from producing enormous error messages.
fn truncate(s: &str) -> String {
    const MAX: usize = 200;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binunicode(s: &str) -> Vec<u8> {
        let mut v = vec![b'X'];
        v.extend((s.len() as u32).to_le_bytes());
        v.extend(s.as_bytes());
        v
    }

    #[test]
    fn forbidden_global_is_named_and_not_run() {
        let mut p = b"\x80\x02cos\nsystem\nq\x00".to_vec();
        p.extend(binunicode("echo hi"));
        p.extend(b"\x85R.");
        let e = unpickle(&p).unwrap_err();
        assert_eq!(e.offset, 2);
        assert!(
            matches!(&e.kind, PickleErrorKind::ForbiddenGlobal { module, name } if module == "os" && name == "system")
        );
        assert!(e.to_string().contains("os.system"), "{e}");
    }

    #[test]
    fn stack_global_forbidden_too() {
        let mut p = b"\x80\x04".to_vec();
        p.extend(b"\x8c\x08builtins\x8c\x04eval\x93.");
        let e = unpickle(&p).unwrap_err();
        assert!(e.to_string().contains("builtins.eval"), "{e}");
    }

    #[test]
    fn shared_containers_keep_identity() {
        // d = {}; memo[0] = d; l = [d]; d['k'] = 1 through the memo; return l.
        let mut p = b"\x80\x02}q\x00]q\x01h\x00a(h\x00".to_vec();
        p.extend(binunicode("k"));
        p.extend(b"K\x01stq\x02h\x01.");
        let r = unpickle(&p).unwrap();
        let Some(Obj::List(items)) = r.obj(&r.root) else {
            panic!("not a list")
        };
        assert_eq!(
            r.get(&items[0], "k").map(|v| matches!(v, Value::Int(1))),
            Some(true)
        );
    }

    #[test]
    fn cycles_and_deep_nesting_are_harmless() {
        // l = []; l.append(l) -- a cycle.
        let r = unpickle(b"\x80\x02]q\x00h\x00a.").unwrap();
        assert!(matches!(r.obj(&r.root), Some(Obj::List(v)) if v.len() == 1));
        // 200k nested tuples via MARK ... TUPLE.
        let n = 200_000;
        let mut p = vec![0x80, 2];
        p.extend(std::iter::repeat_n(b'(', n));
        p.extend(std::iter::repeat_n(b't', n));
        p.push(b'.');
        unpickle(&p).unwrap();
    }

    #[test]
    fn malformed_programs_are_errors() {
        for p in [
            &b""[..],
            b"\x80",
            b"\x80\x02",
            b"\x80\x02.",                         // STOP on empty stack
            b"\x80\x09N.",                        // protocol 9
            b"\x80\x02X\xff\xff\xff\xffab",       // string longer than the data
            b"\x80\x02h\x05.",                    // memo miss
            b"\x80\x02K\x01K\x02s.",              // SETITEM on an int
            b"\x80\x02t.",                        // TUPLE without MARK
            b"\x80\x02(K\x01u.",                  // SETITEMS odd / no dict
            b"\x80\x02\x8a\x41AAAAAAAAA.",        // LONG1 longer than the data
            b"\x80\x02ctorch\nFloatStorage\n)R.", // calling a storage type
        ] {
            assert!(unpickle(p).is_err(), "{p:?}");
        }
    }

    #[test]
    fn wide_ints_strings_and_legacy_storage_ids() {
        // The legacy magic number: a 10-byte LONG1.
        let r = unpickle(b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.").unwrap();
        assert!(
            matches!(&r.root, Value::BigInt(b) if **b == [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19])
        );
        // Wider than 64 bytes: refused, even when the data is there.
        let mut p = b"\x80\x02\x8a\x41".to_vec();
        p.extend([7u8; 65]);
        p.push(b'.');
        let e = unpickle(&p).unwrap_err();
        assert!(e.to_string().contains("65 bytes is too large"), "{e}");
        // Python 2 strings (SHORT_BINSTRING, BINSTRING); invalid UTF-8 and negative lengths fail.
        let r = unpickle(b"\x80\x02U\x03abc.").unwrap();
        assert!(matches!(&r.root, Value::Str(s) if &**s == "abc"));
        let r = unpickle(b"\x80\x02T\x02\x00\x00\x00hi.").unwrap();
        assert!(matches!(&r.root, Value::Str(s) if &**s == "hi"));
        assert!(unpickle(b"\x80\x02U\x01\xff.").is_err());
        assert!(unpickle(b"\x80\x02T\xff\xff\xff\xffhi.").is_err());
        // Persistent ids: 5 elements (zip), 6 with None (legacy); a view is refused.
        let pid = |tail: &[u8]| {
            let mut p = b"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04".to_vec();
            p.extend(tail);
            p.extend(b"tQ.");
            unpickle(&p)
        };
        for tail in [&b""[..], b"N"] {
            let r = pid(tail).unwrap();
            assert!(
                matches!(r.obj(&r.root), Some(Obj::Storage(s)) if s.numel == 4 && s.key == "0")
            );
        }
        let e = pid(b"(X\x01\x00\x00\x001K\x00K\x02t").unwrap_err();
        assert!(e.to_string().contains("storage views"), "{e}");
        assert!(pid(b"NN").is_err());
    }

    #[test]
    fn tensor_classes_and_rebuild_v1() {
        let storage = b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x06NtQ";
        // torch.FloatTensor() + BUILD (storage, offset, size, stride).
        let built = |class: &str| {
            let mut p = format!("\x00ctorch\n{class}\n").into_bytes();
            p[0] = 0x80;
            p.insert(1, 2);
            p.extend(b")\x81(");
            p.extend(storage);
            p.extend(b"K\x01K\x02K\x02\x86K\x01K\x02\x86tb.");
            unpickle(&p)
        };
        let r = built("FloatTensor").unwrap();
        let Some(Obj::Tensor(t)) = r.obj(&r.root) else {
            panic!("{:?}", r.root)
        };
        assert_eq!(
            (t.offset, &t.shape[..], &t.stride[..]),
            (1, &[2, 2][..], &[1, 2][..])
        );
        // The class must match the storage's type.
        let e = built("LongTensor").unwrap_err();
        assert!(e.to_string().contains("I64"), "{e}");
        // A class left without state is not a tensor; BUILD with a 3-tuple is refused.
        let r = unpickle(b"\x80\x02ctorch\nFloatTensor\n)R.").unwrap();
        assert_eq!(r.kind(&r.root), "tensor without state");
        assert!(unpickle(b"\x80\x02ctorch\nFloatTensor\n)RK\x01K\x02K\x03\x87b.").is_err());
        // _rebuild_tensor(storage, offset, size, stride).
        let mut p = b"\x80\x02ctorch._utils\n_rebuild_tensor\n(".to_vec();
        p.extend(storage);
        p.extend(b"K\x00K\x06\x85K\x01\x85tR.");
        let r = unpickle(&p).unwrap();
        assert!(matches!(r.obj(&r.root), Some(Obj::Tensor(t)) if t.shape == [6]));
    }

    #[test]
    fn prefix_reports_its_length() {
        let data = b"\x80\x02K\x05.\x80\x02K\x06.";
        let (r, used) = unpickle_prefix(data).unwrap();
        assert!(matches!(r.root, Value::Int(5)));
        assert_eq!(used, 5);
        let (r, used) = unpickle_prefix(&data[used..]).unwrap();
        assert!(matches!(r.root, Value::Int(6)));
        assert_eq!(used, 5);
    }

    #[test]
    fn long1_sign_extension() {
        let r = unpickle(b"\x80\x02\x8a\x02\xff\x7f.").unwrap();
        assert!(matches!(r.root, Value::Int(0x7fff)));
        let r = unpickle(b"\x80\x02\x8a\x01\xff.").unwrap();
        assert!(matches!(r.root, Value::Int(-1)));
        let r = unpickle(b"\x80\x02\x8a\x05\x00\x00\x00\x00\x01.").unwrap();
        assert!(matches!(r.root, Value::Int(0x1_0000_0000)));
    }
}
