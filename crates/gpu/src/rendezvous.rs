//! Rendezvous of a multi-process (multi-host) NCCL group: rank 0 makes the group's 128-byte
//! [`NcclId`] and serves it over TCP, every other rank connects and reads it
//! (docs/multi-gpu.md). NCCL then connects the ranks itself (its own network transport); this
//! exchange is all it needs from us.
//!
//! Plain `std::net`: one listener, one short message per rank, read and write timeouts. No
//! crate is needed for that, and the message is fixed-size (no serialisation format).
//!
//! Messages: the client sends the number of ranks its process runs (a little-endian `u32`);
//! the server answers with the 8 bytes `R3RNCCL1`, the world size as a little-endian `u32`,
//! then the 128-byte id. The server serves clients until their ranks and its own make the
//! world; the client checks the magic and that the world size is the one it was started with,
//! so processes of two different runs on one port cannot mix.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::GpuError;
use crate::collective::NcclId;

const MAGIC: &[u8; 8] = b"R3RNCCL1";

fn err(what: impl std::fmt::Display) -> GpuError {
    GpuError::Config(format!("rendezvous: {what}"))
}

/// Rank 0's side: a listener bound to `bind` (e.g. `0.0.0.0:29500` to accept other hosts,
/// `127.0.0.1:29500` for ranks on this machine).
pub struct RendezvousServer {
    listener: TcpListener,
}

impl RendezvousServer {
    pub fn bind(bind: &str) -> Result<Self, GpuError> {
        let listener =
            TcpListener::bind(bind).map_err(|e| err(format!("cannot listen on {bind}: {e}")))?;
        Ok(Self { listener })
    }

    /// The address bound (with the port the system chose when `bind` asked for port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, GpuError> {
        self.listener
            .local_addr()
            .map_err(|e| err(format!("listener address: {e}")))
    }

    /// Sends `id` to the other processes as they connect, until their ranks and this process's
    /// `local_ranks` make `world_size`; an error when they have not all connected within
    /// `timeout`.
    pub fn publish(
        &self,
        id: &NcclId,
        world_size: usize,
        local_ranks: usize,
        timeout: Duration,
    ) -> Result<(), GpuError> {
        let deadline = Instant::now() + timeout;
        let mut msg = Vec::with_capacity(8 + 4 + 128);
        msg.extend_from_slice(MAGIC);
        msg.extend_from_slice(&(world_size as u32).to_le_bytes());
        msg.extend_from_slice(&id.0);
        self.listener
            .set_nonblocking(true)
            .map_err(|e| err(format!("listener: {e}")))?;
        let mut served = local_ranks;
        while served < world_size {
            match self.listener.accept() {
                Ok((mut stream, peer)) => {
                    let mut n = [0u8; 4];
                    stream
                        .set_nonblocking(false)
                        .and_then(|_| stream.set_read_timeout(Some(Duration::from_secs(10))))
                        .and_then(|_| stream.set_write_timeout(Some(Duration::from_secs(10))))
                        .and_then(|_| stream.read_exact(&mut n))
                        .and_then(|_| stream.write_all(&msg))
                        .map_err(|e| err(format!("sending the id to {peer}: {e}")))?;
                    let n = u32::from_le_bytes(n) as usize;
                    if n == 0 || served + n > world_size {
                        return Err(err(format!(
                            "{peer} brings {n} ranks, {served} of {world_size} were already there"
                        )));
                    }
                    served += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(err(format!(
                            "only {served} of the {world_size} ranks joined within {:.0} s",
                            timeout.as_secs_f64()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(err(format!("accept: {e}"))),
            }
        }
        Ok(())
    }
}

/// The side of a process without rank 0: connects to rank 0 at `addr` (`host:port`),
/// retrying until `timeout` (rank 0 may start later), announces its `local_ranks` and reads
/// the group id; `world_size` must match rank 0's.
pub fn fetch_id(
    addr: &str,
    world_size: usize,
    local_ranks: usize,
    timeout: Duration,
) -> Result<NcclId, GpuError> {
    let deadline = Instant::now() + timeout;
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| err(format!("cannot resolve {addr}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(err(format!("{addr} resolves to no address")));
    }
    let mut stream = loop {
        let mut last_err = None;
        let mut got = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                Ok(s) => {
                    got = Some(s);
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        if let Some(s) = got {
            break s;
        }
        if Instant::now() >= deadline {
            return Err(err(format!(
                "no rank 0 at {addr} within {:.1} s{}",
                timeout.as_secs_f64(),
                last_err.map(|e| format!(": {e}")).unwrap_or_default()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let left = deadline.saturating_duration_since(Instant::now());
    stream
        .set_read_timeout(Some(left.max(Duration::from_secs(1))))
        .and_then(|_| stream.set_write_timeout(Some(Duration::from_secs(10))))
        .and_then(|_| stream.write_all(&(local_ranks as u32).to_le_bytes()))
        .map_err(|e| err(format!("greeting {addr}: {e}")))?;
    let mut msg = [0u8; 8 + 4 + 128];
    stream
        .read_exact(&mut msg)
        .map_err(|e| err(format!("reading the id from {addr}: {e}")))?;
    if &msg[..8] != MAGIC {
        return Err(err(format!("{addr} is not a rust3r rank 0 (bad greeting)")));
    }
    let theirs = u32::from_le_bytes([msg[8], msg[9], msg[10], msg[11]]) as usize;
    if theirs != world_size {
        return Err(err(format!(
            "rank 0 at {addr} runs a group of {theirs}, this rank was started with --world-size {world_size}"
        )));
    }
    let mut id = [0u8; 128];
    id.copy_from_slice(&msg[12..]);
    Ok(NcclId(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_ranks_exchange_the_id_over_tcp() {
        let server = RendezvousServer::bind("127.0.0.1:0").expect("bind");
        let addr = server.local_addr().expect("addr").to_string();
        let id = NcclId(std::array::from_fn(|i| (i * 7 + 3) as u8));
        let world = 3;
        std::thread::scope(|s| {
            // Rank 0's process runs one rank, two others one each.
            let clients: Vec<_> = (0..world - 1)
                .map(|_| {
                    let addr = addr.clone();
                    s.spawn(move || fetch_id(&addr, world, 1, Duration::from_secs(20)))
                })
                .collect();
            server
                .publish(&id, world, 1, Duration::from_secs(20))
                .expect("publish");
            for c in clients {
                assert_eq!(c.join().expect("client").expect("id"), id);
            }
        });
    }

    #[test]
    fn a_wrong_world_size_and_a_missing_server_are_clear_errors() {
        let server = RendezvousServer::bind("127.0.0.1:0").expect("bind");
        let addr = server.local_addr().expect("addr").to_string();
        let id = NcclId([9; 128]);
        std::thread::scope(|s| {
            let c = s.spawn(|| fetch_id(&addr, 4, 1, Duration::from_secs(20)));
            server
                .publish(&id, 2, 1, Duration::from_secs(20))
                .expect("publish");
            let e = c.join().expect("client").expect_err("world mismatch");
            assert!(e.to_string().contains("--world-size 4"), "{e}");
        });
        // Nobody connects: the server gives up after its timeout.
        let lonely = RendezvousServer::bind("127.0.0.1:0").expect("bind");
        let e = lonely
            .publish(&id, 2, 1, Duration::from_millis(200))
            .expect_err("timeout");
        assert!(e.to_string().contains("only 1 of the 2"), "{e}");
        // Nobody listens: the client gives up after its timeout.
        let port = lonely.local_addr().expect("addr").port();
        drop(lonely);
        let e = fetch_id(
            &format!("127.0.0.1:{port}"),
            2,
            1,
            Duration::from_millis(300),
        )
        .expect_err("no server");
        assert!(e.to_string().contains("no rank 0"), "{e}");
    }
}
