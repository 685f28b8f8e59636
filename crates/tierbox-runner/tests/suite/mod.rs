mod attest;
mod background;
mod runs;
