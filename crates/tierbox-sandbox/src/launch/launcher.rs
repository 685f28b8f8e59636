//! Where a child is cloned: the long-lived unarmed launcher thread, an armed one
//! (`tier_b::launcher`), or the calling thread (module docs of [`super`]).

use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use super::{LaunchError, LaunchOptions, sys};
use crate::linux::step::Step;

pub(crate) struct Job {
    spec: sys::SendSpec,
    reply: mpsc::SyncSender<Result<sys::Cloned, (Step, i32)>>,
}

fn launcher() -> &'static Mutex<mpsc::Sender<Job>> {
    static LAUNCHER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    LAUNCHER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("tierbox-launcher".to_owned())
            .spawn(move || {
                sys::block_all_signals_on_this_thread();
                serve_jobs(rx);
            });
        if let Err(e) = spawned {
            // Without a launcher every launch fails with a clear error below.
            eprintln!("tierbox: cannot start the launcher thread: {e}");
        }
        Mutex::new(tx)
    })
}

/// Serves a launcher thread's jobs until every sender is gone: each job's child cloned
/// on one reused stack, and the result sent back.
pub(crate) fn serve_jobs(rx: mpsc::Receiver<Job>) {
    let mut stack = sys::ChildStack::new();
    while let Ok(job) = rx.recv() {
        let result = sys::clone_job(&job.spec, &mut stack);
        let _ = job.reply.send(result);
    }
}

/// Clones on the calling thread, with every signal blocked around the clone.
fn caller_clone(spec: &mut sys::ChildSpec) -> Result<sys::Cloned, (Step, i32)> {
    thread_local! {
        static STACK: std::cell::RefCell<Option<sys::ChildStack>> = const { std::cell::RefCell::new(None) };
    }
    STACK.with(|cell| {
        let mut guard = cell
            .try_borrow_mut()
            .map_err(|_| (Step::None, libc::EBUSY))?;
        let stack = guard.get_or_insert_with(sys::ChildStack::new);
        sys::with_all_signals_blocked(|| sys::clone_and_exec(spec, stack))
    })
}

/// Clones on the launcher thread and waits for the result.
pub(crate) fn launcher_clone(spec: &mut sys::ChildSpec) -> Result<sys::Cloned, (Step, i32)> {
    submit(&tx_of(launcher())?, spec)
}

fn tx_of(launcher: &Mutex<mpsc::Sender<Job>>) -> Result<mpsc::Sender<Job>, (Step, i32)> {
    launcher
        .lock()
        .map(|tx| tx.clone())
        .map_err(|_| (Step::None, libc::EIO))
}

/// Hands `spec` to a launcher thread and waits until it has cloned (the child has
/// exec'd or failed).
fn submit(tx: &mpsc::Sender<Job>, spec: &mut sys::ChildSpec) -> Result<sys::Cloned, (Step, i32)> {
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let job = Job {
        spec: sys::SendSpec::new(spec),
        reply: reply_tx,
    };
    tx.send(job).map_err(|_| (Step::None, libc::EIO))?;
    // `spec` stays borrowed until the launcher replies, which it does only after the
    // child has exec'd or exited.
    reply_rx.recv().map_err(|_| (Step::None, libc::EIO))?
}

/// Clones the child on the launcher thread or the calling thread, as `opts` says.
pub(super) fn clone_child(
    opts: &LaunchOptions,
    spec: &mut sys::ChildSpec,
) -> Result<sys::Cloned, LaunchError> {
    clone_on(opts, None, spec)
}

/// Clones on `armed` when given, else as [`clone_child`] does.
pub(crate) fn clone_on(
    opts: &LaunchOptions,
    armed: Option<&mpsc::Sender<Job>>,
    spec: &mut sys::ChildSpec,
) -> Result<sys::Cloned, LaunchError> {
    let cloned = match armed {
        Some(tx) => submit(tx, spec),
        None if opts.launcher_thread => launcher_clone(spec),
        None => caller_clone(spec),
    };
    cloned.map_err(|(step, errno)| match step {
        Step::None => LaunchError::Setup {
            what: "clone".to_owned(),
            source: std::io::Error::from_raw_os_error(errno),
        },
        step => LaunchError::Child { step, errno },
    })
}
