//! The relay that lets a node (a private network namespace with only loopback) reach the API
//! server on the host's loopback.

use super::*;

/// Relays TCP connections made to `port` on a node's loopback to `to` on the host: one
/// listening socket made inside the node's network namespace (a socket keeps the namespace
/// it was made in), the outgoing connections from the host's. Stops when dropped.
pub struct Relay {
    stop: Arc<AtomicBool>,
}

impl Relay {
    pub fn into_node(node: &Node, port: u16, to: SocketAddr) -> Relay {
        let ns = std::fs::File::open(format!("/proc/{}/ns/net", node.leader_pid()))
            .expect("the node's network namespace");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // setns(2) moves only this thread; it goes back before connecting anywhere.
            let home = std::fs::File::open("/proc/thread-self/ns/net").expect("own netns");
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("enter the node's network namespace");
            let listener = TcpListener::bind(("127.0.0.1", port));
            nix::sched::setns(home.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("back to the host's network namespace");
            let listener = match listener {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            };
            listener
                .set_nonblocking(true)
                .expect("nonblocking listener");
            let _ = tx.send(Ok(()));
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((inbound, _)) => {
                        let _ = inbound.set_nonblocking(false);
                        std::thread::spawn(move || pipe(inbound, to));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        });
        rx.recv()
            .expect("the relay thread")
            .unwrap_or_else(|e| panic!("relay: listening on the node's 127.0.0.1:{port}: {e}"));
        Relay { stop }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn pipe(inbound: TcpStream, to: SocketAddr) {
    let Ok(outbound) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else {
        return;
    };
    let (Ok(mut a), Ok(mut b)) = (inbound.try_clone(), outbound.try_clone()) else {
        return;
    };
    let (mut inbound, mut outbound) = (inbound, outbound);
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut a, &mut outbound);
        let _ = outbound.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut b, &mut inbound);
    let _ = inbound.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}
