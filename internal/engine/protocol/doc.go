// Package protocol holds the wire types of the Azure Functions custom-handler protocol: the
// invocation request the host POSTs to /<FunctionName>, the response it reads back, and the
// trigger payloads for timer, Service Bus, Storage queue and HTTP functions.
//
// The shapes are the host's (docs/design.md, Host protocol), and the golden payloads in
// internal/app/testdata pin them. The surprises this package absorbs so that callers do not have to:
//
//   - String trigger data arrives JSON-encoded twice ("\"text\""); some producers send it once.
//     [DecodeMessage] accepts both.
//   - Metadata string values arrive quoted, integers arrive as strings, DateTime values carry no
//     offset and no fraction. The Meta* helpers accept every form the host emits.
//   - Top-level properties of a JSON message body leak into Metadata and overwrite keys of the
//     same name. Callers must never trust a metadata key that their own message bodies could
//     carry; Baton's envelope avoids every key the host sets (see work.Envelope).
//
// The same package encodes requests the way the host does (Encode*), for the local host and
// for tests; golden files keep the two directions honest.
package protocol
