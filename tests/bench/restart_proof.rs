//! How long kata-live's restart proof of a unit takes on a booted test node (systemd 252,
//! Type=exec service), median of 15 restarts. A benchmark: it prints figures, nothing is
//! asserted on time. Run as root: `cargo bench --bench restart_proof`.

#[path = "../support/mod.rs"]
mod support;

use kata_live::systemd::Systemd;
use std::time::Duration;
use support::node::{Node, NodeOptions};

const SLEEPER: &str =
    "[Unit]\nStartLimitIntervalSec=0\n[Service]\nType=exec\nExecStart=/bin/sleep infinity\n";

fn main() {
    let node = Node::boot(NodeOptions {
        label: Some("bench-restart-proof".into()),
        ..NodeOptions::bare()
    })
    .unwrap_or_else(|e| panic!("cannot boot a test node: {e}"));
    // No start rate limit: 15 restarts in a row would hit the default StartLimitBurst=5.
    node.write_file("/etc/systemd/system/kl-sleeper.service", SLEEPER.as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    let bus = format!(
        "unix:path={}/run/dbus/system_bus_socket",
        node.root_dir().display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let sd = Systemd::at_address(&bus)
            .await
            .unwrap_or_else(|e| panic!("cannot reach the node's systemd: {e}"));
        sd.daemon_reload(Duration::from_secs(30)).await.unwrap();
        sd.start_unit("kl-sleeper.service", Duration::from_secs(10))
            .await
            .unwrap();
        let mut times = Vec::new();
        for _ in 0..15 {
            let proof = sd
                .restart_unit("kl-sleeper.service", Duration::from_secs(10))
                .await
                .unwrap();
            times.push(proof.elapsed);
        }
        times.sort();
        println!(
            "restart proof on the node (Type=exec service, 15 runs): median {:?}, min {:?}, max {:?}",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1]
        );
    });
}
