//! Moving bytes both ways between a client and its destination, blind to their content.
//!
//! On Linux each direction moves its bytes with `splice(2)` through a pipe of
//! [`COPY_BUFFER_BYTES`]: socket to pipe, pipe to socket, never through user space (a
//! 10 MiB download costs the proxy a third less CPU than copying it, and arrives 0.60–0.67
//! × as fast as directly instead of 0.53–0.63: `docs/benchmarks.md`). Elsewhere, or when
//! the pipes cannot be made, each direction has one [`COPY_BUFFER_BYTES`] buffer,
//! allocated once. End of stream
//! from one side shuts down the other side's write half and the other direction keeps
//! going (half-close); an error in either direction ends the tunnel. For a forwarded
//! plain-HTTP request ([`Ending::WhenDestinationEnds`]) the destination's end of stream
//! ends the exchange (the response is complete: the request said `Connection: close`),
//! while the client's is still passed on as a half-close so a client that shuts down
//! its write side after the request gets its response. The tunnel also ends when no
//! byte moved in either direction for the idle timeout, which covers a peer that stops
//! reading as well as one that stops writing.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::time::Instant;

use crate::COPY_BUFFER_BYTES;
use crate::log::Counters;

/// When a byte last moved, in milliseconds since the tunnel started.
#[derive(Debug)]
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Option<Instant> {
        self.start
            .checked_add(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// When a tunnel ends (besides errors and the idle timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// When both directions reached end of stream (`CONNECT`, SOCKS5).
    WhenBothEnd,
    /// When the destination reached end of stream (a forwarded plain-HTTP request).
    WhenDestinationEnds,
}

/// A direction's pipe: [`spliced::Pipe`] on Linux; none can exist elsewhere.
#[cfg(target_os = "linux")]
pub(crate) type Pipe = spliced::Pipe;
/// A direction's pipe: [`spliced::Pipe`] on Linux; none can exist elsewhere.
#[cfg(not(target_os = "linux"))]
pub(crate) type Pipe = std::convert::Infallible;

/// A pipe for each direction (client to destination, and back) when both can be made,
/// for `splice`; `None` elsewhere or when they cannot (a buffer per direction then).
pub(crate) fn pipes() -> Option<(Pipe, Pipe)> {
    #[cfg(target_os = "linux")]
    return spliced::Pipe::new().zip(spliced::Pipe::new());
    #[cfg(not(target_os = "linux"))]
    None
}

/// Copies `initial` (bytes the client sent before the tunnel opened, or the rewritten
/// HTTP request) to `dest`, then bytes both ways until `ending`, an error in either
/// direction, or `idle` without traffic; through `pipes` (see [`pipes`]) when given.
pub(crate) async fn run(
    client: &mut TcpStream,
    dest: &mut TcpStream,
    initial: &[u8],
    counters: &Counters,
    idle: Duration,
    ending: Ending,
    pipes: Option<(Pipe, Pipe)>,
) {
    let activity = Activity::new();
    let (up_pipe, down_pipe) = pipes.unzip();
    let (mut client_read, mut client_write) = client.split();
    let (mut dest_read, mut dest_write) = dest.split();
    let up = async {
        write_counted(&mut dest_write, initial, &counters.sent, &activity).await?;
        let (from, to) = (&mut client_read, &mut dest_write);
        move_bytes(from, to, up_pipe, &counters.sent, &activity).await
    };
    let (from, to) = (&mut dest_read, &mut client_write);
    let down = move_bytes(from, to, down_pipe, &counters.received, &activity);
    until_done(up, down, ending, &activity, idle).await;
}

/// One direction, through `pipe` when there is one, else through a buffer.
async fn move_bytes(
    from: &mut ReadHalf<'_>,
    to: &mut WriteHalf<'_>,
    pipe: Option<Pipe>,
    counter: &AtomicU64,
    activity: &Activity,
) -> io::Result<()> {
    match pipe {
        #[cfg(target_os = "linux")]
        Some(pipe) => {
            pipe.relay(from.as_ref(), to.as_ref(), counter, activity)
                .await
        }
        #[cfg(not(target_os = "linux"))]
        Some(never) => match never {},
        None => pump(from, to, counter, activity).await,
    }
}

/// Drives both directions until `ending`, an error, or `idle` without traffic.
async fn until_done(
    up: impl Future<Output = io::Result<()>>,
    down: impl Future<Output = io::Result<()>>,
    ending: Ending,
    activity: &Activity,
    idle: Duration,
) {
    let copy = async {
        match ending {
            Ending::WhenBothEnd => {
                let _ = tokio::try_join!(up, down);
            }
            Ending::WhenDestinationEnds => {
                // The `up` branch only ends the select on an error; after a client's
                // end of stream it is disabled and the response keeps flowing.
                tokio::select! {
                    _ = down => {}
                    Err(_) = up => {}
                }
            }
        }
    };
    tokio::select! {
        () = copy => {}
        () = idle_watchdog(activity, idle) => {}
    }
}

/// Copies `from` to `to` until end of stream, then shuts `to` down for writing.
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    counter: &AtomicU64,
    activity: &Activity,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; COPY_BUFFER_BYTES];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            // The peer may already be gone; the other direction finds out on its own.
            let _ = to.shutdown().await;
            return Ok(());
        }
        activity.touch();
        write_counted(to, &buf[..n], counter, activity).await?;
    }
}

/// Writes all of `data`, counting and marking activity after every partial write so a
/// slow but steady reader is not mistaken for an idle one.
async fn write_counted<W>(
    to: &mut W,
    mut data: &[u8],
    counter: &AtomicU64,
    activity: &Activity,
) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    while !data.is_empty() {
        let n = to.write(data).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        Counters::add(counter, n);
        activity.touch();
        data = &data[n..];
    }
    Ok(())
}

/// Completes once nothing moved for `idle`.
async fn idle_watchdog(activity: &Activity, idle: Duration) {
    loop {
        let Some(deadline) = activity.last().and_then(|last| last.checked_add(idle)) else {
            // A timeout too large to represent never fires.
            return std::future::pending().await;
        };
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

#[cfg(target_os = "linux")]
pub(crate) mod spliced {
    use std::io;
    use std::os::fd::OwnedFd;
    use std::sync::atomic::AtomicU64;

    use rustix::pipe::{PipeFlags, SpliceFlags};
    use tokio::io::Interest;
    use tokio::net::TcpStream;

    use super::Activity;
    use crate::COPY_BUFFER_BYTES;
    use crate::log::Counters;

    /// One direction's pipe: `splice` moves page references from the source socket into
    /// it and from it into the destination socket.
    pub(crate) struct Pipe {
        read: OwnedFd,
        write: OwnedFd,
    }

    impl Pipe {
        /// A non-blocking pipe of [`COPY_BUFFER_BYTES`] (or the system's default size
        /// when the per-user pipe allowance is spent); `None` when none can be made.
        pub(crate) fn new() -> Option<Self> {
            let (read, write) =
                rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).ok()?;
            let _ = rustix::pipe::fcntl_setpipe_size(&write, COPY_BUFFER_BYTES);
            Some(Self { read, write })
        }

        /// Fills the pipe from `from` and empties it into `to` until `from`'s end of
        /// stream, then shuts `to` down for writing (the peer may already be gone; the
        /// other direction finds out on its own). Counts what reached `to`.
        pub(super) async fn relay(
            self,
            from: &TcpStream,
            to: &TcpStream,
            counter: &AtomicU64,
            activity: &Activity,
        ) -> io::Result<()> {
            let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
            loop {
                let filled = loop {
                    from.readable().await?;
                    match from.try_io(Interest::READABLE, || {
                        rustix::pipe::splice(
                            from,
                            None,
                            &self.write,
                            None,
                            COPY_BUFFER_BYTES,
                            flags,
                        )
                        .map_err(io::Error::from)
                    }) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        r => break r?,
                    }
                };
                if filled == 0 {
                    let _ = rustix::net::shutdown(to, rustix::net::Shutdown::Write);
                    return Ok(());
                }
                activity.touch();
                let mut in_pipe = filled;
                while in_pipe > 0 {
                    to.writable().await?;
                    match to.try_io(Interest::WRITABLE, || {
                        rustix::pipe::splice(&self.read, None, to, None, in_pipe, flags)
                            .map_err(io::Error::from)
                    }) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Err(e),
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => {
                            in_pipe -= n;
                            Counters::add(counter, n);
                            activity.touch();
                        }
                    }
                }
            }
        }
    }
}
