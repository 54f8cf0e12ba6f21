//! A real `nginx` on loopback for tests and benches: a configuration of theirs inside a prefix
//! of its own, in the foreground, killed on drop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An `nginx` process listening on [`addr`](Self::addr).
pub struct Nginx {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl Nginx {
    /// Where nginx is installed; `None` without it.
    pub fn binary() -> Option<PathBuf> {
        ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    }

    /// Whether nginx is installed; without it a test is skipped with a note, or fails under CI.
    pub fn installed() -> bool {
        crate::present(Nginx::binary().is_some(), "nginx", "nginx")
    }

    /// Debian's `ngx_cache_purge` module, which the example's purge location needs; `None`
    /// without it.
    pub fn purge_module() -> Option<PathBuf> {
        let module = PathBuf::from("/usr/lib/nginx/modules/ngx_http_cache_purge_module.so");
        module.exists().then_some(module)
    }

    /// Whether nginx and its purge module are installed; without them a test is skipped with a
    /// note, or fails under CI.
    pub fn installed_with_purge() -> bool {
        Nginx::installed()
            && crate::present(
                Nginx::purge_module().is_some(),
                "nginx's cache purge module",
                "libnginx-mod-http-cache-purge",
            )
    }

    /// The main-context line that loads the purge module, for [`start_with`](Self::start_with).
    pub fn load_purge_module() -> String {
        Nginx::purge_module().map_or_else(String::new, |module| {
            format!("load_module {};", module.display())
        })
    }

    /// Starts `binary` with `http`, the body of the `http { }` block, in which `{listen}` is
    /// replaced by the address nginx must listen on and `{dir}` by its own directory (for
    /// caches and include files). Waits until it listens.
    pub fn start(binary: &Path, workers: usize, http: &str) -> Nginx {
        Nginx::start_with(binary, workers, "", http)
    }

    /// As [`start`](Self::start), with `main` (e.g. `load_module` lines) before the rest.
    pub fn start_with(binary: &Path, workers: usize, main: &str, http: &str) -> Nginx {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = std::env::temp_dir().join(format!("nginx-{}-{port}", std::process::id()));
        std::fs::create_dir_all(dir.join("cache")).expect("nginx's directory");
        // The workers run as an unprivileged user when the master is root: let them write.
        let _ = Command::new("chmod")
            .args(["-R", "0777"])
            .arg(&dir)
            .status();
        let d = dir.display();
        let http = http
            .replace("{listen}", &format!("127.0.0.1:{port}"))
            .replace("{dir}", &d.to_string());
        let config = format!(
            "{main}\nworker_processes {workers};\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 4096; }}\nhttp {{\n    access_log off;\n    \
             client_body_temp_path {d}/body;\n    proxy_temp_path {d}/proxy;\n    \
             fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n    \
             scgi_temp_path {d}/scgi;\n{http}\n}}\n"
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, config).expect("nginx.conf");
        let child = Command::new(binary)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&path)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("nginx starts");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "nginx did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx { child, addr, dir }
    }

    /// The `http { }` body of nginx's own way to authenticate an API: `auth_request` to the
    /// integrator's `/api/user` at `auth`, cached with `proxy_cache` (a minute per token, with
    /// `proxy_cache_lock`), in front of the API at `game` (every location).
    pub fn proxy_cache_peer(game: SocketAddr, auth: SocketAddr) -> String {
        format!(
            r#"    proxy_cache_path {{dir}}/cache levels=1:2 keys_zone=auth:10m max_size=100m inactive=10m;
    upstream game {{ server {game}; keepalive 64; }}
    upstream integrator {{ server {auth}; keepalive 16; }}
    server {{
        listen {{listen}};
        location / {{
            auth_request /_auth;
            proxy_pass http://game;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
        location = /_auth {{
            internal;
            proxy_pass http://integrator/api/user;
            proxy_method POST;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header Authorization $http_authorization;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache auth;
            proxy_cache_key $http_authorization;
            proxy_cache_valid 200 401 403 60s;
            proxy_ignore_headers Cache-Control Expires Set-Cookie Vary;
            proxy_cache_lock on;
        }}
    }}"#
        )
    }

    /// The `http { }` body of the sidecar's example (`examples/nginx`) as shipped: its cache
    /// file, with the cache in nginx's own directory and the purge location on `purge`, and a
    /// server including its locations in front of the API at `api`, asking the sidecar at
    /// `sidecar`.
    pub fn sidecar_example(sidecar: SocketAddr, api: SocketAddr, purge: SocketAddr) -> String {
        Nginx::sidecar_example_with(sidecar, api, purge, "")
    }

    /// As [`sidecar_example`](Self::sidecar_example), with answers saying
    /// `X-Token-Resolver-Cache: HIT` when nginx's cache vouched for them (a debugging header
    /// the example leaves to its user).
    pub fn sidecar_example_showing_hits(
        sidecar: SocketAddr,
        api: SocketAddr,
        purge: SocketAddr,
    ) -> String {
        let header = "add_header X-Token-Resolver-Cache $token_resolver_cache;";
        Nginx::sidecar_example_with(sidecar, api, purge, header)
    }

    /// The example with `server`, a line of its own, in its server block.
    fn sidecar_example_with(
        sidecar: SocketAddr,
        api: SocketAddr,
        purge: SocketAddr,
        server: &str,
    ) -> String {
        let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/nginx");
        let cache = std::fs::read_to_string(format!("{examples}/token-resolver-cache.conf"))
            .expect("examples/nginx/token-resolver-cache.conf")
            .replace("/run/nginx-token-resolver", "{dir}/cache")
            .replace("127.0.0.1:7362", &purge.to_string());
        format!(
            "{cache}\n    upstream token_resolver_sidecar {{ server {sidecar}; keepalive 64; }}\n    \
             upstream game_api {{ server {api}; keepalive 64; }}\n    \
             server {{\n        listen {{listen}};\n        {server}\n        \
             include {examples}/token-resolver-auth.conf;\n    }}"
        )
    }

    /// Its own directory (for include files copied there).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Nginx {
    /// SIGTERM, so that the master stops its workers (a SIGKILL to the master alone leaves
    /// them serving, orphaned); SIGKILL if it has not exited within two seconds.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(2);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
