// Package cosmos is the shared Cosmos DB adapter. It owns what every Cosmos
// store needs and none should copy:
//
//   - the account: construction and authentication (account key,
//     connection string, an Entra ID credential, a user-assigned managed
//     identity, DefaultAzureCredential; Entra tokens are refused over plain
//     HTTP to anything but this machine), explicit SDK retries
//     (DefaultRetry), and a reader of the account's properties
//     (DefaultConsistency), which the SDK does not expose;
//   - what the SDK gets wrong: every request's partition key header is
//     sent as ASCII-only JSON (azcosmos v1.5.0 writes Go escapes Cosmos DB
//     refuses), and a client stuck on a failed first read of the account's
//     metadata is replaced on the next use (Account.Client, RebuildInterval)
//     instead of failing every request for five minutes;
//   - the Strong-consistency check (RequireStrong), which fails with an
//     *OperatorError naming the level found and the fix;
//   - container get-or-create from a ContainerSpec (partition key path,
//     indexing policy, default TTL), refusing an existing container that
//     is partitioned on another path (EnsureContainer);
//   - once-only first-use initialization shared by concurrent callers and
//     retried after a failure (Lazy), and Container, which runs the Strong
//     check and EnsureContainer through it;
//   - error classification (Classify, IsNotFound, StatusCode), the
//     operator-error type (OperatorError), and Explain, which words a
//     refused request (401, 403 with the role to assign, 400, …) for an
//     operator;
//   - the resource-id rule (CheckID), which configuration validation also
//     uses;
//   - the options every store shares (StoreOptions: database, auto-create,
//     relaxed consistency, init timeout, clock), their defaults and checks
//     (ApplyDefaults), and the ContainerOptions built from them.
//
// It never reads or names app settings: options are typed fields, and
// errors name those fields.
//
// A new store needs only its own documents and queries. Its Options embed
// StoreOptions next to its own fields; its New applies the defaults and
// builds the container on an *Account the application creates once per
// process:
//
//	errs := o.ApplyDefaults("MessageDatabase") // then the store's own checks
//	…
//	c, err := account.Container(o.ContainerOptions(cosmos.ContainerSpec{
//		ContainerID: "sessions", PartitionKeyPath: "/id", DefaultTTL: cosmos.TTLOnNoDefault},
//		cosmos.StrongReason{Store: "the session store", Why: "…", Accepting: "…"}))
//	…
//	if err := c.Ready(ctx); err != nil { // first use: Strong check, container
//		return err
//	}
//	_, err = c.Client().ReadItem(ctx, pk, id, nil) // the current client, per operation
//	if cosmos.IsNotFound(err) { … }
package cosmos
