//! A real `redis-server` speaking TLS on a free loopback port, with a CA and a server
//! certificate (for `127.0.0.1` and `localhost`) made at run time, stopped on drop.
//!
//! It also listens in the clear on another port, for the test's own look at the data.

use std::path::PathBuf;

use super::{free_port, RedisServer};

pub struct RedisTls {
    /// The server, started with `--tls-port`; its plain port is for the test only.
    pub server: RedisServer,
    tls_port: u16,
    /// The CA that signed the server's certificate, PEM.
    pub ca_pem: String,
    /// Where the certificate and key files are; removed on drop.
    dir: PathBuf,
}

/// A CA, and a certificate for `127.0.0.1`/`localhost` that it signed, with its key: PEMs.
pub fn certificates() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "token-resolver test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

impl RedisTls {
    /// Starts one with `extra` further arguments; `None` where redis-server is not installed.
    pub fn start(extra: &[&str]) -> Option<RedisTls> {
        let (ca_pem, cert_pem, key_pem) = certificates();
        let tls_port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "token-resolver-redis-tls-{}-{tls_port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, pem: &str| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap();
            path.to_string_lossy().into_owned()
        };
        let mut args = vec![
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            write("server.pem", &cert_pem),
            "--tls-key-file".to_owned(),
            write("server.key", &key_pem),
            "--tls-ca-cert-file".to_owned(),
            write("ca.pem", &ca_pem),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let server = RedisServer::start_with(args)?;
        Some(RedisTls {
            server,
            tls_port,
            ca_pem,
            dir,
        })
    }

    /// `rediss://127.0.0.1:<tls port>`, with `userinfo` (`user:password@`) if not empty.
    pub fn url(&self, userinfo: &str) -> String {
        format!("rediss://{userinfo}127.0.0.1:{}", self.tls_port)
    }

    pub fn tls_port(&self) -> u16 {
        self.tls_port
    }
}

impl Drop for RedisTls {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
