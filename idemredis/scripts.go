package idemredis

import "github.com/redis/go-redis/v9"

// The Lua scripts. Each touches one hash, KEYS[1], so one slot, and
// compares and sets the key's state, fencing token and nonce together.
// Times are Unix microseconds as decimal strings, which Lua's doubles hold
// exactly (below 2^53); the scripts compare them as numbers and store the
// strings they were given, never a number turned back into a string.
// Which rule of idemstore/rules.go each condition implements is written
// beside it and in doc.go.
//
// The hash's fields:
//
//	c, k   the scope's client and key
//	m, p   method and path
//	rh, rf request hash and fields
//	st     "started" or "completed" (idemstore.StatusInFlight, StatusCompleted)
//	ca     created at (µs)
//	la, le locked at and lease expiry (µs); absent for a key without a holder
//	tok    fencing token
//	n      the current holder's nonce, random per claim
//	tk     "1" when the current holder took the key over
//	tc     the W3C trace context of the request that claimed the key
//	       last (idemstore.ClaimParams.TraceContext); absent for none
//	sc, hd, bd  the response: status, headers (JSON), body
//	rp, rs the recovery point and its state (JSON); absent before any, and
//	       after a completion unless MinReplicas (see uncompleteScript)

// claimScript claims KEYS[1].
//
// ARGV: 1 now, 2 retention (µs, 0 never expires), 3 lock timeout (µs),
// 4 method, 5 path, 6 request hash, 7 request fields, 8 nonce, 9 lease
// expiry ("" for none), 10 TTL (ms, 0 for none), 11 client, 12 key,
// 13 trace context ("" for none), 14 and 15 the recovery point and its
// state that a key the claim makes starts at ("" for none; see
// Store.ClaimAt).
//
// It returns {"new"|"takeover", token, created at} when the caller owns
// the key, and {"exists", HGETALL without the body} otherwise.
var claimScript = redis.NewScript(`
local h = KEYS[1]
local now = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local timeout = tonumber(ARGV[3])
local cur = redis.call('HMGET', h, 'st', 'ca', 'la', 'tok', 'rh', 'n', 'tk')

local function create(tok)
	redis.call('DEL', h)
	local f = {'c', ARGV[11], 'k', ARGV[12], 'm', ARGV[4], 'p', ARGV[5],
		'rh', ARGV[6], 'rf', ARGV[7], 'st', 'started', 'ca', ARGV[1], 'la', ARGV[1],
		'tok', tok, 'n', ARGV[8], 'tk', '0'}
	local function add(name, v)
		if v and v ~= '' then f[#f+1] = name; f[#f+1] = v end
	end
	add('le', ARGV[9])
	add('tc', ARGV[13])
	add('rp', ARGV[14])
	add('rs', ARGV[15])
	redis.call('HSET', h, unpack(f))
	if ARGV[10] ~= '0' then redis.call('PEXPIRE', h, ARGV[10]) end
	return {'new', tok, ARGV[1]}
end

if not cur[1] then
	return create('1')
end
-- A retry of this very claim (go-redis resends a command whose answer
-- was lost): the nonce is the caller's.
if cur[6] == ARGV[8] then
	if cur[7] == '1' then return {'takeover', cur[4], cur[2]} end
	return {'new', cur[4], cur[2]}
end
-- idemstore.Expired: retention > 0 and now >= created + retention. The
-- key is replaced as if new; its token keeps growing.
if retention > 0 and now >= tonumber(cur[2]) + retention then
	return create(tostring(tonumber(cur[4]) + 1))
end
-- ClaimParams.CanTakeOver: started, LeaseExpired(locked, now, timeout)
-- (now >= locked + timeout; a key without a holder has none live), and
-- the same request hash.
if cur[1] == 'started' and (not cur[3] or now >= tonumber(cur[3]) + timeout) and cur[5] == ARGV[6] then
	local tok = tostring(tonumber(cur[4]) + 1)
	redis.call('HSET', h, 'tok', tok, 'la', ARGV[1], 'n', ARGV[8], 'tk', '1')
	if ARGV[9] ~= '' then redis.call('HSET', h, 'le', ARGV[9]) else redis.call('HDEL', h, 'le') end
	if ARGV[13] ~= '' then redis.call('HSET', h, 'tc', ARGV[13]) else redis.call('HDEL', h, 'tc') end
	return {'takeover', tok, cur[2]}
end
return {'exists', redis.call('HMGET', h, 'c', 'k', 'm', 'p', 'rh', 'rf', 'st', 'ca', 'la', 'le', 'tok', 'tc', 'sc', 'hd', 'bd')}
`)

// held is the fence every lease script starts with: the key is started
// and its token and nonce are the lease's.
const held = `
local h = KEYS[1]
local cur = redis.call('HMGET', h, 'st', 'tok', 'n')
local mine = cur[2] == ARGV[1] and cur[3] == ARGV[2]
`

// completeScript stores the response of the lease whose token and nonce
// are ARGV[1] and ARGV[2]: ARGV 3 status code, 4 headers, 5 body, 6 "keep"
// to keep the recovery point (with MinReplicas, for uncompleteScript).
// It returns {"ok"}, {"lost"}, or {"completed", the key's fields} when
// another request completed it.
var completeScript = redis.NewScript(held + `
if mine and cur[1] == 'completed' then
	return {'ok'} -- a retry of this very Complete
end
if not mine or cur[1] ~= 'started' then
	if cur[1] == 'completed' then
		return {'completed', redis.call('HMGET', h, 'c', 'k', 'm', 'p', 'rh', 'rf', 'st', 'ca', 'la', 'le', 'tok', 'tc', 'sc', 'hd', 'bd')}
	end
	return {'lost'}
end
redis.call('HSET', h, 'st', 'completed', 'sc', ARGV[3], 'hd', ARGV[4], 'bd', ARGV[5])
if ARGV[6] ~= 'keep' then redis.call('HDEL', h, 'rp', 'rs') end
return {'ok'}
`)

// uncompleteScript undoes the completion of the lease ARGV[1], ARGV[2]
// that too few replicas acknowledged: the key is started again, under
// the same lease, at the recovery point it had, and has no response.
var uncompleteScript = redis.NewScript(held + `
if not mine or cur[1] ~= 'completed' then return 'gone' end
redis.call('HSET', h, 'st', 'started')
redis.call('HDEL', h, 'sc', 'hd', 'bd')
return 'ok'
`)

// releaseScript frees the key of the lease ARGV[1], ARGV[2]: it deletes
// a key that passed no recovery point and leaves one that passed one
// without a holder. ARGV[3] "made" deletes the key whatever its point: a
// claim that made the key gives it back before anything ran under it. A
// lease that no longer holds the key changes nothing.
var releaseScript = redis.NewScript(held + `
if not mine or cur[1] ~= 'started' then return 'gone' end
if ARGV[3] ~= 'made' and redis.call('HEXISTS', h, 'rp') == 1 then
	redis.call('HDEL', h, 'la', 'le')
	return 'kept'
end
redis.call('DEL', h)
return 'deleted'
`)

// checkpointScript saves the recovery point ARGV[3] and its state
// ARGV[4] for the lease ARGV[1], ARGV[2]. It returns {"ok", the point
// and state it replaced ("" for none)}, or {"lost"}.
var checkpointScript = redis.NewScript(held + `
if not mine or cur[1] ~= 'started' then return {'lost'} end
local was = redis.call('HMGET', h, 'rp', 'rs')
redis.call('HSET', h, 'rp', ARGV[3], 'rs', ARGV[4])
return {'ok', was[1] or '', was[2] or ''}
`)

// restorePointScript puts back the recovery point ARGV[3] and state
// ARGV[4] ("" for none) that a checkpoint of the lease ARGV[1], ARGV[2]
// replaced, when too few replicas acknowledged that checkpoint.
var restorePointScript = redis.NewScript(held + `
if not mine or cur[1] ~= 'started' then return 'lost' end
if ARGV[3] == '' then redis.call('HDEL', h, 'rp') else redis.call('HSET', h, 'rp', ARGV[3]) end
if ARGV[4] == '' then redis.call('HDEL', h, 'rs') else redis.call('HSET', h, 'rs', ARGV[4]) end
return 'ok'
`)

// adminReleaseScript ends the lease of a started key whose token and
// nonce are still ARGV[1], ARGV[2], as an operator's release read them
// (the decision, idemstore.ReleaseKeyParams.Check, is made in Go on that
// read): the token grows, the holder goes, and ARGV[3] becomes the nonce,
// so that neither the old token nor the old nonce fences anything.
var adminReleaseScript = redis.NewScript(held + `
if not mine or cur[1] ~= 'started' then return 'changed' end
redis.call('HSET', h, 'tok', tostring(tonumber(cur[2]) + 1), 'n', ARGV[3], 'tk', '0')
redis.call('HDEL', h, 'la', 'le')
return 'ok'
`)

// deleteScript deletes a completed key whose token and nonce are still
// ARGV[1], ARGV[2] (idemstore.CheckDelete is decided in Go on the read).
var deleteScript = redis.NewScript(held + `
if not mine or cur[1] ~= 'completed' then return 'changed' end
redis.call('DEL', h)
return 'ok'
`)

// deleteIfScript deletes a key whose token, nonce and status are still
// ARGV[1], ARGV[2] and ARGV[3], as Store.DeleteKeyIf read them (its check
// is made in Go on that read).
var deleteIfScript = redis.NewScript(held + `
if not mine or cur[1] ~= ARGV[3] then return 'changed' end
redis.call('DEL', h)
return 'ok'
`)
