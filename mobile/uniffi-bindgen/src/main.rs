//! `uniffi-bindgen`, built from the same uniffi version as `cellbind-mobile`.

fn main() {
    uniffi::uniffi_bindgen_main()
}
