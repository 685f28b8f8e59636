mod attest;
mod background;
mod review;
mod runs;
mod tier_b_runtimes;
