mod attest;
mod background;
mod git;
mod review;
mod runs;
