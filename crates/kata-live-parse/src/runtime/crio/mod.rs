//! CRI-O: [`drop_in`], the handler drop-in's form; [`conf`], the files' reading order and
//! the definition the running CRI-O serves on `GET /config`, compared with ours.

pub mod conf;
pub mod drop_in;
