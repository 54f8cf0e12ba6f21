//! The reference API over HTTPS with a private CA made at run time: one `ReferenceApi` served
//! twice, over TLS (what the resolver calls) and in the clear (where the tests log in and take
//! tokens, with a client that knows nothing of the CA). Both serve the same users and tokens.

use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use token_resolver_player::IntegratorClient;
use token_resolver_reference_api::{ApiConfig, ReferenceApi, RunningApi};

/// A CA and a certificate for `127.0.0.1` and `localhost` that it signed.
pub struct PrivateCa {
    /// The CA's certificate: what `add_root_certificate` is given.
    pub ca_pem: String,
    /// The server's certificate chain and key.
    pub cert_pem: String,
    pub key_pem: String,
}

impl PrivateCa {
    pub fn new() -> PrivateCa {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let leaf =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let leaf_cert = leaf.signed_by(&leaf_key, &ca_cert, &ca_key).unwrap();
        PrivateCa {
            ca_pem: ca_cert.pem(),
            cert_pem: leaf_cert.pem(),
            key_pem: leaf_key.serialize_pem(),
        }
    }
}

impl Default for PrivateCa {
    fn default() -> Self {
        PrivateCa::new()
    }
}

/// The API over TLS and in the clear, and the CA behind its certificate.
pub struct TlsApi {
    pub tls: RunningApi,
    pub plain: RunningApi,
    pub ca: PrivateCa,
}

impl TlsApi {
    /// Serves the demo users, `/api/user` answering after `latency`.
    pub async fn start(latency: Duration) -> TlsApi {
        let ca = PrivateCa::new();
        let api = ReferenceApi::new(ApiConfig::default()).unwrap();
        api.set_user_latency(latency);
        let addr = "127.0.0.1:0".parse().unwrap();
        let plain = api.clone().spawn(addr).await.unwrap();
        let tls = api
            .spawn_tls(addr, ca.cert_pem.as_bytes(), ca.key_pem.as_bytes())
            .await
            .unwrap();
        TlsApi { tls, plain, ca }
    }

    /// `n` access tokens of alice's, taken in the clear.
    pub async fn tokens(&self, n: usize) -> Vec<String> {
        let mut client = IntegratorClient::new(self.plain.base_url()).unwrap();
        client.login_password("alice", "wonderland").await.unwrap();
        let mut tokens = Vec::with_capacity(n);
        for _ in 0..n {
            tokens.push(
                client
                    .fetch_access_token()
                    .await
                    .unwrap()
                    .secret()
                    .to_owned(),
            );
        }
        tokens
    }
}
