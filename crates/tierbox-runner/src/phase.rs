#![allow(missing_docs, clippy::all)]
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
pub static SUM: [AtomicU64; 24] = [const { AtomicU64::new(0) }; 24];
pub static CNT: [AtomicU64; 24] = [const { AtomicU64::new(0) }; 24];
pub const NAMES: [&str; 24] = ["validate","facts+state","launch_in","capture.start","watch_exit","wait_for_end","end_tree","drain","outcome_of","finish/cleanup","request_json","seal","o.stats","o.redact","o.plan_digest","o.git_dirs","s.ended","s.enforcement","s.runfacts","s.request_digest","s.sign","s.new_id","",""];
pub fn add(i: usize, t: Instant) -> Instant { let now = Instant::now(); SUM[i].fetch_add((now - t).as_nanos() as u64, Ordering::Relaxed); CNT[i].fetch_add(1, Ordering::Relaxed); now }
pub fn report() { for i in 0..24 { let c = CNT[i].load(Ordering::Relaxed); if c > 0 { eprintln!("{:>16} {:8.1} us (n={})", NAMES[i], SUM[i].load(Ordering::Relaxed) as f64 / c as f64 / 1000.0, c); } } }
