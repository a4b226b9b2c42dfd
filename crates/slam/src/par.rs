//! Deterministic parallel reductions.
//!
//! The per-pixel sums of tracking and the back end run on rayon's thread pool, split into
//! chunks of a fixed size ([`CHUNK`]) that does not depend on the number of threads. Each
//! chunk is summed sequentially, the partial sums are collected in chunk order, and combined
//! left to right on the calling thread. The floating-point operations and their order are
//! therefore the same whatever the thread count or scheduling: results are bit-identical run
//! to run and between `RAYON_NUM_THREADS=1` and any other setting.

use std::ops::Range;

use rayon::prelude::*;

/// Items (pixels) per chunk of a reduction: small enough that a 160x120 level splits into 75
/// chunks (load balance on 16 cores), large enough that a chunk's work (tens of microseconds)
/// dwarfs the scheduling.
pub const CHUNK: usize = 256;

/// Sums `map` over the chunks `0..n` (chunk `c` covers `c * chunk .. min(n, (c + 1) * chunk)`)
/// in parallel, then combines the partial results in chunk order with `combine`.
/// `None` when `n == 0`.
pub fn chunked_reduce<A, F, C>(n: usize, chunk: usize, map: F, combine: C) -> Option<A>
where
    A: Send,
    F: Fn(Range<usize>) -> A + Sync + Send,
    C: FnMut(A, A) -> A,
{
    let chunk = chunk.max(1);
    let parts: Vec<A> = (0..n.div_ceil(chunk))
        .into_par_iter()
        .map(|c| map(c * chunk..((c + 1) * chunk).min(n)))
        .collect();
    parts.into_iter().reduce(combine)
}

/// [`chunked_reduce`] run sequentially on the calling thread (same chunks, same order, same
/// bits): the reference the parallel version is tested against.
pub fn chunked_reduce_seq<A, F, C>(n: usize, chunk: usize, map: F, combine: C) -> Option<A>
where
    F: Fn(Range<usize>) -> A,
    C: FnMut(A, A) -> A,
{
    let chunk = chunk.max(1);
    (0..n.div_ceil(chunk))
        .map(|c| map(c * chunk..((c + 1) * chunk).min(n)))
        .reduce(combine)
}

/// Fills a row-major image `out` of `width` columns in parallel: `f(u, v, i)` for every pixel
/// `i = v * width + u` (whole rows per task, no division per pixel; element-wise, so no
/// ordering question).
pub fn fill_rows<T: Send, F: Fn(usize, usize, usize) -> T + Sync + Send>(
    out: &mut [T],
    width: usize,
    f: F,
) {
    if width == 0 {
        return;
    }
    let rows = CHUNK.div_ceil(width).max(1);
    out.par_chunks_mut(rows * width)
        .enumerate()
        .for_each(|(c, part)| {
            let v0 = c * rows;
            for (r, row) in part.chunks_mut(width).enumerate() {
                let v = v0 + r;
                for (u, o) in row.iter_mut().enumerate() {
                    *o = f(u, v, v * width + u);
                }
            }
        });
}
