//! Copying bytes both ways between a client and its destination, blind to their content.
//!
//! Each direction has one [`COPY_BUFFER_BYTES`] buffer, allocated once. End of stream
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

/// Copies `initial` (bytes the client sent before the tunnel opened, or the rewritten
/// HTTP request) to `dest`, then bytes both ways until `ending`, an error in either
/// direction, or `idle` without traffic.
pub(crate) async fn run(
    client: &mut TcpStream,
    dest: &mut TcpStream,
    initial: &[u8],
    counters: &Counters,
    idle: Duration,
    ending: Ending,
) {
    let activity = Activity {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let (mut client_read, mut client_write) = client.split();
    let (mut dest_read, mut dest_write) = dest.split();
    let up = async {
        write_counted(&mut dest_write, initial, &counters.sent, &activity).await?;
        pump(&mut client_read, &mut dest_write, &counters.sent, &activity).await
    };
    let down = pump(
        &mut dest_read,
        &mut client_write,
        &counters.received,
        &activity,
    );
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
        () = idle_watchdog(&activity, idle) => {}
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
