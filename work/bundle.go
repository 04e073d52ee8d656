package work

// Bundles: the leader puts up to a job's cap of consecutive partitions of a plan batch into one
// message. A bundle costs one send, one delivery and one completion on the queue, and on the
// worker one manifest read (none while the run's is cached), one result per partition, one
// done append and one partial update (one of each per 256 partitions of a larger bundle),
// instead of one of each per partition. Its partitions run in one invocation, up to
// BundleConcurrency at once, each with its own create-once result and its own retries (a retry
// is a message of one partition). A bundle that comes back — its invocation failed or its
// instance died — is split into messages of one partition, so a partition that kills its
// process or outlasts the invocation's timeout cannot take its batch-mates to the dead-letter
// queue with it.

// DefaultMaxBundle is a job's cap on partitions per message unless it sets one (see
// Registry.SetMaxBundle).
const DefaultMaxBundle = 256

// BundleConcurrency is the most partitions of one bundle that run at once. The queue and
// storage calls a bundle saves grow with its size, the partitions an instance runs at once do
// not: at most the host's concurrent deliveries times BundleConcurrency (16 × 32 with the
// host's defaults), however large the bundles.
const BundleConcurrency = 32

// MinBundlesPerBatch is the default spread of a plan batch: the fewest messages it is sent as
// when it has that many partitions and its job's cap is at most DefaultMaxBundle, so it spreads
// over at least this many deliveries, and so over instances. A job whose cap is above
// DefaultMaxBundle trades spread for fewer messages in proportion (see SpreadBundleSize).
const MinBundlesPerBatch = 8

// DefaultFoldBlock is a run's block of consecutive partitions folded into the same partial
// (ledger.Manifest.FoldBlock): a bundle, aligned on its size, updates one partial per block it
// spans.
const DefaultFoldBlock = DefaultMaxBundle

// BundleSize is SpreadBundleSize at the default spread, MinBundlesPerBatch.
func BundleSize(limit, n int) int { return SpreadBundleSize(limit, n, MinBundlesPerBatch) }

// SpreadBundleSize is how many partitions go in one message for a plan batch of n partitions
// of a job whose cap is limit, the batch spread over at least spread messages: the largest
// power of two, at most the cap and MaxBundle, that still sends the batch as at least spread
// messages for a cap up to DefaultMaxBundle, spread×DefaultMaxBundle/cap (at least 1) above it
// (so, at spread 8, 8 messages of 256 for the default batch, 2 of 1,024 at a cap of 1,024).
// Bundles start at multiples of their size, so a bundle never crosses a fold block partway.
func SpreadBundleSize(limit, n, spread int) int {
	limit = min(max(limit, 1), MaxBundle)
	spread = max(min(spread, spread*DefaultMaxBundle/limit), 1)
	want := min(limit, max((n+spread-1)/spread, 1))
	k := 1
	for k*2 <= want {
		k *= 2
	}
	for k > 1 && messages(n, k) < spread {
		k /= 2 // a small batch: a share rounded up can leave fewer messages (9 in bundles of 2: 5)
	}
	return k
}

// messages is how many bundles of size k a batch of n partitions starting on a multiple of k
// makes.
func messages(n, k int) int { return (n + k - 1) / k }
