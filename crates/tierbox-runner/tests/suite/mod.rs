mod attest;
mod background;
mod git;
mod review;
mod runs;
mod term;
mod tier_b_runtimes;
