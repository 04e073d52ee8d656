// Package inventory is a job that audits a blob container: it counts objects and bytes by
// content type and access tier, and recomputes the MD5 of every blob whose Content-MD5 is set,
// reporting mismatches (corrupt) and blobs it cannot read (for example archived ones).
//
// Params (JSON object): container (required), prefix (optional), partitionSize (names per
// partition, default 500, 1..5000).
//
// Plan lists the names under the prefix in order and cuts them into contiguous ranges of
// partitionSize names; a partition's payload is the range (after, last]: the name before its
// first one ("" for the first partition) and its last name. The planner's cursor is the last
// name emitted, so planning resumes with a listing that starts after it.
//
// What is and is not guaranteed: a partition audits the blobs that exist in its range when it
// runs, so blobs created after planning inside a range are counted and blobs deleted are not
// (a blob deleted between its listing and its download counts as vanished). Names sorting
// after the last planned name are not audited. Names are compared as Go strings (bytewise);
// Azure lists in the same order. Listings pass StartFrom so each partition reads only its own
// range; a service that rejects the parameter gets a listing from the prefix's start instead.
package inventory
