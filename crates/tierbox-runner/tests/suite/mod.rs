mod attest;
mod background;
mod git;
mod review;
mod runs;
mod tier_b_runtimes;
