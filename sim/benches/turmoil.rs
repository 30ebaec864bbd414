//! Wall time of the turmoil engine: `steady` at CHORUS's default timings (10 ms tick), 10
//! simulated minutes, for several cluster sizes.
//!
//! `cargo bench -p chorus-sim --bench turmoil` (sizes 10 32 64), or pass sizes and minutes:
//! `cargo bench -p chorus-sim --bench turmoil -- 100 1`.

use std::time::Instant;

use chorus_sim::run::{run, Engine};
use chorus_sim::scenario::builtin;

fn main() -> anyhow::Result<()> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (sizes, minutes) = match args.as_slice() {
        [] => (vec![10, 32, 64], 10),
        [sizes @ .., minutes] if !sizes.is_empty() => (sizes.to_vec(), *minutes),
        [size] => (vec![*size], 10),
        _ => unreachable!("slice patterns cover every length"),
    };
    println!("nodes  simulated  wall      ms/tick  elections  messages  violations");
    for nodes in sizes {
        let mut s = builtin("steady").expect("built-in");
        s.nodes = nodes as usize;
        s.duration_ms = minutes * 60_000;
        let start = Instant::now();
        let f = run(&s, 1, Engine::Turmoil, None, false)?;
        let wall = start.elapsed();
        let ticks = s.duration_ms / 10;
        println!(
            "{nodes:>5}  {minutes:>6} min  {:>7.2} s  {:>7.3}  {:>9}  {:>8}  {:>10}",
            wall.as_secs_f64(),
            wall.as_secs_f64() * 1_000.0 / ticks as f64,
            f.stats.elections,
            f.stats.messages,
            f.violations.len()
        );
    }
    Ok(())
}
