mod attest;
mod background;
mod review;
mod runs;
