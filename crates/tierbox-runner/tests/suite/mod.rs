mod background;
mod runs;
