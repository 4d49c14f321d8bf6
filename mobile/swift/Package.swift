// swift-tools-version:5.9
// The Swift package of the Cellbind SDK. This file is a template: mobile/scripts/
// build-xcframework.sh copies it into the package it assembles, next to
//   cellbindFFI.xcframework      the static library for iOS devices and simulators, with the C
//                                header and module map of the FFI module `cellbindFFI`
//   Sources/Cellbind/cellbind.swift   the uniffi-generated Swift API (module `Cellbind`)
// An app adds that directory as a local package (or the zipped XCFramework as a remote
// `binaryTarget(url:checksum:)`); mobile/PACKAGING.md explains.
import PackageDescription

let package = Package(
    name: "Cellbind",
    platforms: [.iOS(.v15)],
    products: [
        .library(name: "Cellbind", targets: ["Cellbind"]),
    ],
    targets: [
        .binaryTarget(name: "cellbindFFI", path: "cellbindFFI.xcframework"),
        .target(
            name: "Cellbind",
            dependencies: ["cellbindFFI"],
            path: "Sources/Cellbind",
            // What the Rust static library links against (rustls-platform-verifier uses the
            // Security framework through security-framework and core-foundation);
            // build-xcframework.sh checks this list against rustc's native-static-libs.
            linkerSettings: [
                .linkedFramework("Security"),
                .linkedFramework("CoreFoundation"),
            ]
        ),
    ]
)
