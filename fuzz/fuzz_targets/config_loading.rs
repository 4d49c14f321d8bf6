//! Each server's configuration, read as its loader reads the file's text
//! (`runtime::config::parse_str`, strict about unknown keys, then the server's validation):
//! a configuration or a typed refusal, never a panic.
//!
//! Input: first byte picks the server, the rest is the TOML text. (The property tests
//! `prop_config_loading` go through each server's `Config::load` with a real file.)
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&server, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    match server % 4 {
        0 => {
            let _ = auth_service::Config::from_toml(text);
        }
        1 => {
            if let Ok(c) = runtime::config::parse_str::<cell_endpoint::Config>(text, "fuzz") {
                if c.validate().is_ok() {
                    let _ = c.settings();
                }
            }
        }
        2 => {
            if let Ok(c) = runtime::config::parse_str::<control_plane::config::Config>(text, "fuzz")
            {
                let _ = c.validate();
            }
        }
        _ => {
            if let Ok(c) = runtime::config::parse_str::<demo_app::Config>(text, "fuzz") {
                let _ = c.validate();
            }
        }
    }
});
