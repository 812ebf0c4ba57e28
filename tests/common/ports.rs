//! Free loopback TCP ports for servers a test starts.
#![allow(dead_code)]

use std::net::TcpListener;

/// `N` distinct free ports on 127.0.0.1. All listeners are held until every
/// port is chosen: two single picks in a row can return the same port (CI
/// saw a test server's gRPC and metrics ports collide).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// One free port on 127.0.0.1 (see [`free_ports`] for several at once).
pub fn free_port() -> u16 {
    free_ports::<1>()[0]
}
