//! containerd's configuration as containerd itself reads it: the handler drop-in kata-live
//! owns, the one-element `imports` edit of the main file that makes containerd read it, the
//! running daemon's effective runtime table (verbose CRI `Status`), and the detection of
//! nodes whose containerd configuration is generated (k3s, rke2, k0s) or that run CRI-O.
//!
//! Pure logic; I/O only in the small functions taking paths.
//!
//! # containerd's rules, with their sources
//!
//! Measured = seen with Debian's containerd 2.1.9 (sid) and 1.7.24 (trixie) binaries, by
//! `containerd config dump` and a running daemon's verbose `Status`; the fixtures in
//! `tests/fixtures/containerd/` are those outputs (see its README), and the unit tests below
//! rest on them.
//!
//! - **Only `imports` brings a file in.** containerd reads one file (`--config`, default
//!   `/etc/containerd/config.toml`) and then, breadth first, the files its `imports` name,
//!   each once (a `loaded` set breaks cycles) [containerd: `cmd/containerd/server/config/config.go`
//!   `LoadConfigWithPlugins`; 1.7: `services/server/config/config.go` `LoadConfig`]. There is
//!   no drop-in directory of its own: a file nobody imports is ignored (NODE-FACTS, measured).
//! - **How an import is resolved.** `filepath.Clean`, then a relative path is joined to the
//!   directory of the file that imports it; a path containing `*` is then expanded with Go's
//!   `filepath.Glob` (sorted matches; no match = nothing, no error) [2.x `resolveImports`].
//!   1.7's source globbed *before* joining (a relative glob was relative to the working
//!   directory), but Debian's 1.7.24 resolves `conf.d/*.toml` against the main file's
//!   directory too (measured from `/`). A missing non-glob import is not an error for
//!   `config dump` on 2.1.9 (measured). kata-live writes an absolute glob, so both agree.
//! - **How a later file merges — 2.x: key by key.** `mergeConfig` is
//!   `mergo.Merge(to, from, WithOverride, sliceTransformer)`; `plugins` is a `map[string]any`
//!   and mergo descends into nested maps, so an imported file overrides exactly the keys it
//!   sets, at any depth, even with `false` or `""`; arrays are unioned (elements not yet
//!   present are appended); only `stream_processors`, `proxy_plugins` and `timeouts` entries
//!   are replaced whole [2.x `mergeConfig`]. Measured on 2.1.9: a drop-in setting
//!   `runtimes.runc.options.SystemdCgroup = false` leaves the main file's `BinaryName` and
//!   `runtime_type` in place (fixture `v2.1/merge-dump.toml`). Consequence: keys another file
//!   sets in *our* handler's table survive next to ours; the proof reports such keys.
//! - **How a later file merges — 1.7: a plugin section is replaced whole.** 1.7's
//!   `mergeConfig` ends with `for k, v := range from.Plugins { to.Plugins[k] = v }`
//!   ("Replace entire sections instead of merging map's values"), `Plugins` being
//!   `map[string]toml.Tree` [1.7 `services/server/config/config.go`]. Measured on 1.7.24: a
//!   drop-in holding only `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-remote]`
//!   wipes the main file's `sandbox_image`, `default_runtime_name` and every runtime of the
//!   CRI plugin (fixture `v1.7/replace-dump.toml`), and the daemon then fails to load its CRI
//!   plugin (`no corresponding runtime configured in containerd.runtimes for containerd
//!   default_runtime_name = "runc"`: every CRI call answers Unimplemented). So on 1.7 a
//!   handler drop-in is only safe if it carries the whole CRI section.
//! - **`version`.** The root file's `version` decides the plugin names: 2 =
//!   `io.containerd.grpc.v1.cri` (1.7's CRI plugin; `containerd.runtimes.NAME` under it),
//!   3 = `io.containerd.cri.v1.runtime` (2.x; the same `containerd.runtimes.NAME` below it)
//!   [2.x `config.go` version history; `plugins/cri/runtime/plugin.go` `migrateConfig` moves
//!   a v2 runtime section to the v3 plugin]. 1.7 refuses `version = 3` ("unsupported config
//!   version `3`", measured). An imported file need not carry `version`. Measured on 2.1.9
//!   (`config dump`, asserted by tests/containerd_config.rs), a drop-in declaring our handler
//!   next to a root declaring its own runtime:
//!
//!   | root | drop-in names (its `version`: none, 2 or 3) | ours | the root's |
//!   | --- | --- | --- | --- |
//!   | v2 | v2 (none or 2) | kept | kept |
//!   | v2 | v3 (none or 3) | kept | **lost** |
//!   | v3 | v3 (none or 3) | kept | kept |
//!   | v3 | v2 (none or 2) | **lost** | kept |
//!
//!   So a version-2 file imported by a 2.x daemon works only under a version-2 root, and
//!   the wrong plugin name silently loses a table. Rule kept here: the drop-in has no
//!   `version` key and uses the plugin name of the root file's version ([`config::render`]).
//!   (NODE-FACTS also records a `version = 3` drop-in stopping a v2 root's other sections
//!   from being migrated.) A later `LoadConfigWithPlugins` refuses a drop-in whose
//!   `version` is higher than the root's ("drop-in config version N higher than root config
//!   version M") and migrates a lower one by itself; 2.1.9 and 1.7.24 hold no such check
//!   (the message is not in their binaries). A drop-in without `version` is fine for both.
//! - **Which drop-in form, per daemon.** [`config::import_merge`] from the daemon's version:
//!   2.x [`config::render`] (the handler table only); 1.7
//!   [`config::render_whole_section`] (the main file's CRI section plus the handler).
//! - **The effective configuration.** CRI `Status` with `verbose: true` answers
//!   `info["config"] = json.Marshal(c.config)` (plus `golang`, `cniconfig`, …)
//!   [2.x `internal/cri/server/status.go`; 1.7 `pkg/cri/server/status.go`]: the handler is
//!   at `.containerd.runtimes.NAME`, with the Go struct's JSON names (`runtimeType`,
//!   `runtimePath`, `options`, `privileged_without_host_devices`, `PodAnnotations`,
//!   `snapshotter`, …) — see [`effective`].
//! - **No reload.** Runtime tables are read at start only: a restart is needed (NODE-FACTS).
//! - **A sandbox's handler.** `PodSandbox.runtime_handler` is filled for a named handler;
//!   for the default handler it is "" and the verbose `PodSandboxStatus` info has no
//!   `runtimeHandler` key (but has `runtimeType`), measured on 2.1.9 on the test node:
//!   [`crate::cri::handler_from_verbose_info`] reads that as the default handler.
//! - **Files the import brings in.** Before the import exists, files of the drop-in
//!   directory are not read by containerd; once it exists, they are, in glob order. So
//!   preflight walks the files *as the edited main file would import them*
//!   ([`files::config_files_with`]): a broken or shadowing file there is found before any
//!   write (measured otherwise: a conf.d file declaring the handler after ours was only
//!   caught by the effective-definition proof, then rolled back).

pub mod config;
pub mod detect;
pub mod effective;
pub mod files;
pub mod imports;

pub use config::{ConfigVersion, ContainerdHandler, ImportMerge};
pub use detect::{detect_generator, detect_runtime, Detected, Generator, NodeFacts, Runtime};
pub use effective::{compare_dump, compare_effective, Definition, Mismatch};
pub use files::{config_files, config_files_with, declarations, Declarations};
pub use imports::{ensure_import, import_covering, remove_import, Edit, ImportError};

/// containerd's default main file (`--config`).
pub const MAIN_FILE: &str = "/etc/containerd/config.toml";
/// The directory of handler drop-ins kata-live owns, and the import that reads it.
pub const DROP_IN_DIR: &str = "/etc/containerd/conf.d";
pub const DROP_IN_GLOB: &str = "/etc/containerd/conf.d/*.toml";
