//! Times the parts of one learned-retrieval query at the released shapes (random head and
//! codebook): `cargo run --release -p rust3r-mast3r --example retrieval_timing [words] [tokens]`.
use std::time::Instant;

use rust3r_mast3r::retrieval::{AsmkParams, Codebook, NFeat, RetrievalHead};

fn main() {
    let mut args = std::env::args().skip(1);
    let words: usize = args.next().map_or(65536, |a| a.parse().expect("words"));
    let tokens: usize = args.next().map_or(768, |a| a.parse().expect("tokens"));
    let (e, dim) = (1024, 1024);
    let head = RetrievalHead::random(e, dim, NFeat::Count(300), 1);
    let cb = Codebook::random(words, dim, 2).expect("codebook");
    let feat: Vec<f32> = (0..tokens * e).map(|i| ((i as f32) * 0.37).sin()).collect();
    let m = AsmkParams::default().query_assignment;
    for _ in 0..2 {
        let t = Instant::now();
        let local = head.select(&feat).expect("select");
        let t_sel = t.elapsed();
        let t = Instant::now();
        let assign = cb.nearest_all(&local.features, m);
        let t_near = t.elapsed();
        let t = Instant::now();
        let agg = rust3r_mast3r::retrieval::asmk::aggregate(&cb, &local.features, dim, &assign);
        let t_agg = t.elapsed();
        println!(
            "select {:.1} ms, nearest_all {:.1} ms, aggregate {:.1} ms ({} words) on {} threads",
            t_sel.as_secs_f64() * 1e3,
            t_near.as_secs_f64() * 1e3,
            t_agg.as_secs_f64() * 1e3,
            agg.words.len(),
            rayon::current_num_threads()
        );
    }
}
