//! The calling thread's network namespace as the kernel's BPF programs name it.

use std::os::fd::AsRawFd;

/// `SO_NETNS_COOKIE` (linux/asm-generic/socket.h): the namespace's cookie, what
/// `bpf_get_netns_cookie` returns for a socket of it.
const SO_NETNS_COOKIE: libc::c_int = 71;

/// The cookie of the calling thread's network namespace (Linux 5.14 and later), read from a
/// socket made for it.
pub fn netns_cookie() -> std::io::Result<u64> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")
        .or_else(|_| std::net::UdpSocket::bind("[::1]:0"))?;
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: an open socket, a u64 to write and its length.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cookie)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_namespace_has_a_cookie() {
        let a = super::netns_cookie().expect("Linux 5.14 or later");
        assert_ne!(a, 0);
        assert_eq!(
            super::netns_cookie().unwrap(),
            a,
            "one namespace, one cookie"
        );
    }
}
