// Package idemstore is what a store author implements and calls: the
// [Store] and [Lease] interfaces the idem middleware claims keys through,
// the values they exchange ([ClaimParams], [ClaimResult], [Record],
// [Response], [LeaseInfo]), the errors a store returns, and the optional
// interfaces for the purge ([PurgeStore], [PurgeLock], [KeyStatsStore]),
// recovery points ([RecoveryLease], [RecoveryStore]), operators' key
// administration ([KeyReader], [KeyAdmin]) and readiness ([Readier]).
//
// Every rule of the key's state machine lives in rules.go, once: when a
// key expires ([Expired]), when a claim may replace or take over the key
// it found ([ClaimParams.MayReplace], [ClaimParams.CanTakeOver]), what a
// purge deletes ([PurgeParams.Purges]), which keys a resumer lists
// ([UnfinishedParams.Lists]), and what an operator may release or delete
// ([ReleaseKeyParams.Check], [CheckDelete]). A store calls them, or says
// the same in SQL, and never restates them.
//
// A new store runs the conformance suites of package idemtest
// (RunStoreTests, with recovery points when the store keeps them,
// RunAdminTests and RunOutboxTests) against
// a real server: they check each rule with concurrent claims, expired
// leases and takeovers. idempg (PostgreSQL), idemsqlite (SQLite) and
// idemtest's memory store implement every interface here.
//
// Service authors do not need this package, except for the fields of a
// [Scope] and the types of a custom store.
package idemstore
