//! Integration tests of tierbox-server: the HTTP server in a child process of its own,
//! driven over TCP loopback and its unix socket.
mod suite;
