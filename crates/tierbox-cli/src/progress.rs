//! Progress on stderr, for one-time work a user would otherwise wait through in silence:
//! compiling a WebAssembly module for this machine (CPython: 26 MB, tens of seconds in a
//! debug build) the first time Tier A runs it. Shown only when stderr is a terminal, as a
//! spinner with the elapsed seconds, replaced by one line when the work is done.

use std::io::{IsTerminal, Write};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tierbox_wasm::progress::Compile;

/// How often the spinner redraws.
const FRAME: Duration = Duration::from_millis(120);

const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// A running spinner: how to stop it, and its thread.
type Spinner = (mpsc::Sender<()>, std::thread::JoinHandle<()>);

/// Shows compilations on stderr from now on, when stderr is a terminal.
pub fn install() {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let spinner: Arc<Mutex<Option<Spinner>>> = Arc::default();
    tierbox_wasm::progress::set_observer(move |event| {
        let Ok(mut current) = spinner.lock() else {
            return;
        };
        match event {
            Compile::Started { module_bytes } => {
                let (stop, stopped) = mpsc::channel::<()>();
                let what = format!(
                    "compiling {:.1} MB of WebAssembly for this machine (first use; cached for later runs)",
                    module_bytes as f64 / 1e6
                );
                let thread = std::thread::Builder::new()
                    .name("tierbox-progress".to_owned())
                    .spawn(move || spin(&what, &stopped));
                if let Ok(thread) = thread {
                    *current = Some((stop, thread));
                }
            }
            Compile::Finished { millis } => {
                if let Some((stop, thread)) = current.take() {
                    let _ = stop.send(());
                    let _ = thread.join();
                    eprintln!(
                        "tierbox: compiled the module in {:.1} s",
                        millis as f64 / 1000.0
                    );
                }
            }
        }
    });
}

fn spin(what: &str, stopped: &mpsc::Receiver<()>) {
    let started = Instant::now();
    let mut err = std::io::stderr();
    for frame in FRAMES.iter().cycle() {
        let _ = write!(
            err,
            "\r\x1b[2K{frame} tierbox: {what} {} s",
            started.elapsed().as_secs()
        );
        let _ = err.flush();
        if !matches!(
            stopped.recv_timeout(FRAME),
            Err(mpsc::RecvTimeoutError::Timeout)
        ) {
            break;
        }
    }
    let _ = write!(err, "\r\x1b[2K");
    let _ = err.flush();
}
