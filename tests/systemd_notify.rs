//! sd_notify progress reaches the socket named by NOTIFY_SOCKET, one assignment per message.
//! (One test in this binary: it sets the process environment.)

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use kata_live::notify;

#[test]
fn status_extend_timeout_and_ready_reach_the_notify_socket() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::env::set_var("NOTIFY_SOCKET", &path);

    let mut buf = [0u8; 4096];
    let mut recv = || {
        let n = sock.recv(&mut buf).expect("a notify message");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    notify::status("restarting crio.service\n(step 3 of 7)");
    assert_eq!(
        recv().trim_end(),
        "STATUS=restarting crio.service (step 3 of 7)"
    );
    notify::extend_timeout(Duration::from_secs(90));
    assert_eq!(recv().trim_end(), "EXTEND_TIMEOUT_USEC=90000000");
    notify::ready();
    assert_eq!(recv().trim_end(), "READY=1");
}
