//! The PostgreSQL migrations are embedded at build time (`sqlx::migrate!`): a new migration file
//! must rebuild the crate.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
