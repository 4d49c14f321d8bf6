//! The auth-service's request bodies, read as its body extractor reads them
//! (`protocol::json::from_object_slice` into the route's type).
//!
//! Input: first byte picks the route's type, the rest is the body. (The property test
//! `prop_request_bodies` also sends each refused body through the real router.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::admin::cell::{
    ContractorExport, ImportUsers, KeyRevokeRequest, NewUser, OwnershipBulk, RevokeRequest,
};
use protocol::api::{RebindRequest, SignInRequest};
use protocol::feed::Reapply;
use protocol::json::from_object_slice;
use protocol::ownership::OwnershipRecord;

fuzz_target!(|data: &[u8]| {
    let Some((&route, body)) = data.split_first() else {
        return;
    };
    // A body is read or refused with a serde_json error, and never as anything but an object.
    let read = match route % 10 {
        0 => from_object_slice::<SignInRequest>(body).is_ok(),
        1 => from_object_slice::<RebindRequest>(body).is_ok(),
        2 => from_object_slice::<NewUser>(body).is_ok(),
        3 => from_object_slice::<ImportUsers>(body).is_ok(),
        4 => from_object_slice::<OwnershipRecord>(body).is_ok(),
        5 => from_object_slice::<OwnershipBulk>(body).is_ok(),
        6 => from_object_slice::<KeyRevokeRequest>(body).is_ok(),
        7 => from_object_slice::<RevokeRequest>(body).is_ok(),
        8 => from_object_slice::<ContractorExport>(body).is_ok(),
        _ => from_object_slice::<Reapply>(body).is_ok(),
    };
    if read {
        let first = body.iter().find(|b| !b.is_ascii_whitespace());
        assert_eq!(first, Some(&b'{'));
    }
});
