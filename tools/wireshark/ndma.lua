-- Wireshark/tshark dissector for NDMA, the network-level DMA fabric over UDP.
--
-- The wire format is docs/PROTOCOL.md (reference implementation: the Go
-- packages wire and fabric). This dissector decodes the 96-byte header
-- (checking its CRC32C), ACK/NACK frames with their SACK blocks, the
-- reply-to trailer of forwarded pool requests, chain hop lists, optimizer
-- parameters and control messages (type, RESP flag, the fields of every
-- type and the 16-byte HMAC tag). A packet with the AUTH flag shows its
-- security association and the payload as encrypted, with its tag.
--
-- It registers on the default UDP ports of `ndma memd` (7470) and
-- `ndma switch` (7471), and as a heuristic UDP dissector, so NDMA traffic
-- on any other port (endpoints use ephemeral ports) is recognised by its
-- version byte, consistent lengths and CRC.
--
-- Use:
--   tshark -X lua_script:tools/wireshark/ndma.lua -i lo -f udp
--   tshark -X lua_script:tools/wireshark/ndma.lua -r capture.pcap -V
-- or copy the file into Wireshark's personal Lua plugin folder
-- (Help > About Wireshark > Folders, e.g. ~/.local/lib/wireshark/plugins/).

local ndma = Proto("ndma", "NDMA network-level DMA")

local HEADER_LEN = 96
local TAG_LEN = 16
local CTRL_TAG_LEN = 16
local REPLYTO_LEN = 18
local FENCE_LEN = 12
local ACK_FIXED_LEN = 24
local MAX_SACK = 32
local CHAIN_HOP_LEN = 16
local OPTIM_PARAMS_LEN = 32
local PORTS = { 7470, 7471 }

-- Bit operations: Wireshark ships the "bit" library (LuaBitOp); Lua 5.2
-- also has bit32.
local bitlib = bit or bit32
local band, bxor, rshift = bitlib.band, bitlib.bxor, bitlib.rshift

---------------------------------------------------------------------------
-- Names

local op_names = {
    [0x01] = "WRITE", [0x02] = "READ", [0x03] = "CAS", [0x04] = "FETCHADD",
    [0x05] = "VECTOR", [0x06] = "SEND", [0x07] = "NOP", [0x08] = "CONTROL",
    [0x09] = "EVENT", [0x0a] = "DATA", [0x0b] = "CHAIN", [0x0c] = "OPTIM", [0x0d] = "FENCE",
    [0x10] = "ACK", [0x11] = "NACK", [0x12] = "HANDSHAKE",
}

local mode_names = {
    [0] = "unicast", [1] = "multicast", [2] = "aggregate", [3] = "anycast", [4] = "pool",
}

local status_names = {
    [0] = "OK", [1] = "BAD_KEY", [2] = "OUT_OF_BOUNDS", [3] = "MISALIGNED",
    [4] = "UNKNOWN_OP", [5] = "PERMISSION", [6] = "BAD_OPERAND", [7] = "TOO_LARGE",
    [8] = "BUSY", [9] = "MEMBER_DEAD", [10] = "NOT_MEMBER", [11] = "AUTH", [12] = "LOST", [13] = "FENCED",
}

local dtype_names = { [0] = "none", [1] = "f32", [2] = "f64", [3] = "i32", [4] = "i64" }
local alu_names = { [0] = "none", [1] = "ADD", [2] = "MIN", [3] = "MAX", [4] = "PROD" }
local chainop_names = { [1] = "LOAD", [2] = "APPLY", [3] = "STORE", [4] = "ACCUMULATE", [5] = "DELTA",
    [6] = "GFACCUMULATE" }
local CHAIN_GFACCUMULATE = 6
local optim_names = { [1] = "SGD", [2] = "Adam" }
local health_names = { [0] = "ok", [1] = "degraded", [2] = "unavailable", [3] = "lost" }

local ctrl_names = {
    [1] = "JOIN", [2] = "LEAVE", [3] = "DESTROY", [4] = "HEARTBEAT", [5] = "REGISTER",
    [6] = "LOOKUP", [7] = "POOLNODE", [8] = "POOLCREATE", [9] = "POOLOPEN",
    [10] = "POOLFREE", [11] = "POOLSTAT", [12] = "POOLGRANT", [13] = "POOLREVOKE",
    [14] = "POOLREBUILD", [15] = "POOLREBUILDGO", [16] = "POOLREBUILT",
    [17] = "JOINSTATUS", [18] = "POOLREPORT", [19] = "POOLEPOCH",
    [20] = "POOLCOLUMNLOST", [21] = "POOLCOLUMNGRANT", [22] = "POOLCOLUMNRESTORED", [23] = "JOINVIA", [24] = "MEMBERGONE",
}

local FLAG_RESP, FLAG_AUTH, FLAG_RETX, FLAG_SYN, FLAG_REPLYTO, FLAG_ACK = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
local FLAG_FENCE = 0x40
local FLAGS_KNOWN = 0x1f
local OP_CONTROL, OP_EVENT, OP_DATA, OP_CHAIN, OP_OPTIM = 0x08, 0x09, 0x0a, 0x0b, 0x0c
local OP_WRITE, OP_CAS, OP_FADD, OP_VECTOR, OP_FENCE = 0x01, 0x03, 0x04, 0x05, 0x0d
local OP_ACK, OP_NACK = 0x10, 0x11
local MODE_UNICAST, MODE_AGGREGATE, MODE_ANYCAST, MODE_POOL = 0, 2, 3, 4

local function name_of(t, v, what)
    return t[v] or string.format("%s(%d)", what, v)
end

---------------------------------------------------------------------------
-- Fields

-- f holds the fields by short name (f.op is ndma.op).
local f = {}
local F = ndma.fields
local function add(pf) F[#F + 1] = pf; return pf end

f.version = add(ProtoField.uint8("ndma.version", "Version", base.DEC))
f.op = add(ProtoField.uint8("ndma.op", "Opcode", base.HEX, op_names))
f.mode = add(ProtoField.uint8("ndma.mode", "Mode", base.DEC, mode_names))
f.flags = add(ProtoField.uint8("ndma.flags", "Flags", base.HEX))
f.flag_resp = add(ProtoField.bool("ndma.flags.resp", "RESP (response)", 8, nil, FLAG_RESP))
f.flag_auth = add(ProtoField.bool("ndma.flags.auth", "AUTH (authentication tag follows the payload)", 8, nil, FLAG_AUTH))
f.flag_retx = add(ProtoField.bool("ndma.flags.retx", "RETX (retransmission)", 8, nil, FLAG_RETX))
f.flag_syn = add(ProtoField.bool("ndma.flags.syn", "SYN (no ACK from this peer yet)", 8, nil, FLAG_SYN))
f.flag_replyto = add(ProtoField.bool("ndma.flags.replyto", "REPLYTO (reply-to trailer)", 8, nil, FLAG_REPLYTO))
f.flag_ack = add(ProtoField.bool("ndma.flags.ack", "ACK (an ACK frame rides after the payload)", 8, nil, FLAG_ACK))
f.flag_fence = add(ProtoField.bool("ndma.flags.fence", "FENCE (fence trailer)", 8, nil, FLAG_FENCE))
f.flag_rsvd = add(ProtoField.uint8("ndma.flags.reserved", "Reserved flags", base.HEX, nil, 0x80))
f.group = add(ProtoField.uint32("ndma.group", "Group", base.DEC))
f.src = add(ProtoField.uint16("ndma.src", "Src member", base.DEC))
f.dst = add(ProtoField.uint16("ndma.dst", "Dst member", base.DEC))
f.said = add(ProtoField.uint32("ndma.said", "Security association", base.HEX_DEC))
f.psn = add(ProtoField.uint32("ndma.psn", "PSN", base.DEC))
f.ackbase = add(ProtoField.uint32("ndma.ackbase", "AckBase", base.DEC))
f.msgid = add(ProtoField.uint64("ndma.msgid", "Message id", base.DEC))
f.offset = add(ProtoField.uint32("ndma.offset", "Offset", base.DEC))
f.msglen = add(ProtoField.uint32("ndma.msglen", "Message length", base.DEC))
f.len = add(ProtoField.uint16("ndma.len", "Payload length", base.DEC))
f.status = add(ProtoField.uint8("ndma.status", "Status", base.DEC, status_names))
f.dtype = add(ProtoField.uint8("ndma.dtype", "Dtype", base.DEC, dtype_names))
f.alu = add(ProtoField.uint8("ndma.alu", "Alu", base.DEC, alu_names))
f.hop = add(ProtoField.uint8("ndma.hop", "Hop", base.DEC))
f.copies = add(ProtoField.uint16("ndma.copies", "Copies", base.HEX))
f.copies_n = add(ProtoField.uint16("ndma.copies.count", "Copies", base.DEC, nil, 0x00ff))
f.copies_deg = add(ProtoField.bool("ndma.copies.degraded", "DEGRADED (a replica was left out)", 16, nil, 0x8000))
f.addr = add(ProtoField.uint64("ndma.addr", "Remote address", base.HEX))
f.key = add(ProtoField.uint64("ndma.key", "Region key", base.HEX))
f.caller = add(ProtoField.uint64("ndma.caller", "Caller scope tag (relayed by the switch; 0: none)", base.HEX))
f.operand1 = add(ProtoField.uint64("ndma.operand1", "Operand 1", base.DEC))
f.operand2 = add(ProtoField.uint64("ndma.operand2", "Operand 2", base.DEC))
f.ts = add(ProtoField.uint64("ndma.ts", "Timestamp (ns)", base.DEC))
f.saseq = add(ProtoField.uint32("ndma.saseq", "SA sequence (low 32 bits)", base.DEC))
f.crc = add(ProtoField.uint32("ndma.crc", "CRC32C", base.HEX))
f.crc_status = add(ProtoField.string("ndma.crc.status", "CRC32C status"))
f.payload = add(ProtoField.bytes("ndma.payload", "Payload"))
f.encrypted = add(ProtoField.bytes("ndma.encrypted", "Encrypted payload"))
f.tag = add(ProtoField.bytes("ndma.tag", "Authentication tag"))
f.trailing = add(ProtoField.bytes("ndma.trailing", "Bytes past the packet"))

-- ACK / NACK frame
f.ack = add(ProtoField.none("ndma.ack", "ACK frame"))
f.ack_cum = add(ProtoField.uint32("ndma.ack.cum", "Cumulative ACK (next PSN expected)", base.DEC))
f.ack_window = add(ProtoField.uint32("ndma.ack.window", "Receive window", base.DEC))
f.ack_echots = add(ProtoField.uint64("ndma.ack.echots", "Echoed timestamp (ns)", base.DEC))
f.ack_delay = add(ProtoField.uint32("ndma.ack.delay", "ACK delay (ns)", base.DEC))
f.ack_nblocks = add(ProtoField.uint8("ndma.ack.nblocks", "SACK blocks", base.DEC))
f.ack_qdelay = add(ProtoField.uint24("ndma.ack.qdelay", "Queueing delay (us + 1; 0: not measured)", base.DEC))
f.sack = add(ProtoField.string("ndma.sack", "SACK block"))
f.sack_start = add(ProtoField.uint32("ndma.sack.start", "Start PSN", base.DEC))
f.sack_end = add(ProtoField.uint32("ndma.sack.end", "End PSN (exclusive)", base.DEC))

-- Reply-to trailer
f.replyto = add(ProtoField.string("ndma.replyto", "Reply to"))
f.replyto_v4 = add(ProtoField.ipv4("ndma.replyto.ipv4", "Address"))
f.replyto_v6 = add(ProtoField.ipv6("ndma.replyto.ipv6", "Address"))
f.replyto_port = add(ProtoField.uint16("ndma.replyto.port", "Port", base.DEC))
f.fence = add(ProtoField.string("ndma.fence", "Fence"))
f.fence_id = add(ProtoField.uint32("ndma.fence.id", "Fence id", base.DEC))
f.fence_token = add(ProtoField.uint64("ndma.fence.token", "Token", base.HEX))

-- Chain and optimizer
f.event = add(ProtoField.string("ndma.event", "Event"))
f.chain_hop = add(ProtoField.string("ndma.chain.hop", "Hop"))
f.chain_addr = add(ProtoField.uint64("ndma.chain.addr", "Pool address", base.HEX))
f.chain_op = add(ProtoField.uint8("ndma.chain.op", "Op", base.DEC, chainop_names))
f.chain_coef = add(ProtoField.uint8("ndma.chain.coef", "GF(2^8) coefficient", base.HEX))
f.chain_pad = add(ProtoField.bytes("ndma.chain.pad", "Padding"))
f.chain_data = add(ProtoField.bytes("ndma.chain.data", "Data"))
f.optim_algo = add(ProtoField.uint8("ndma.optim.algo", "Algorithm", base.DEC, optim_names))
f.optim_step = add(ProtoField.uint32("ndma.optim.step", "Step", base.DEC))
f.optim_lr = add(ProtoField.float("ndma.optim.lr", "Learning rate"))
f.optim_beta1 = add(ProtoField.float("ndma.optim.beta1", "Beta1"))
f.optim_beta2 = add(ProtoField.float("ndma.optim.beta2", "Beta2"))
f.optim_eps = add(ProtoField.float("ndma.optim.eps", "Epsilon"))
f.optim_wd = add(ProtoField.float("ndma.optim.wd", "Weight decay"))
f.optim_grad = add(ProtoField.bytes("ndma.optim.gradients", "Gradients (f32, little-endian)"))

-- Control messages
f.ctrl = add(ProtoField.string("ndma.ctrl", "Control message"))
f.ctrl_type = add(ProtoField.uint8("ndma.ctrl.type", "Type", base.DEC, ctrl_names))
f.ctrl_flags = add(ProtoField.uint8("ndma.ctrl.flags", "Flags", base.HEX))
f.ctrl_resp = add(ProtoField.bool("ndma.ctrl.resp", "RESP (response)", 8, nil, 0x01))
f.ctrl_tag = add(ProtoField.bytes("ndma.ctrl.tag", "HMAC-SHA256 tag (first 16 bytes)"))
f.ctrl_job = add(ProtoField.string("ndma.ctrl.job", "Job"))
f.ctrl_service = add(ProtoField.string("ndma.ctrl.service", "Service"))
f.ctrl_size = add(ProtoField.uint16("ndma.ctrl.size", "Size", base.DEC))
f.ctrl_rank = add(ProtoField.uint16("ndma.ctrl.rank", "Rank", base.DEC))
f.ctrl_mtu = add(ProtoField.uint16("ndma.ctrl.mtu", "MTU", base.DEC))
f.ctrl_policy = add(ProtoField.uint8("ndma.ctrl.policy", "Policy", base.DEC))
f.ctrl_group = add(ProtoField.uint32("ndma.ctrl.group", "Group", base.DEC))
f.ctrl_member = add(ProtoField.uint16("ndma.ctrl.member", "Member", base.DEC))
f.ctrl_epoch = add(ProtoField.uint64("ndma.ctrl.epoch", "Epoch", base.DEC))
f.ctrl_count = add(ProtoField.uint16("ndma.ctrl.count", "Count", base.DEC))
f.ctrl_dead = add(ProtoField.uint16("ndma.ctrl.dead", "Dead member", base.DEC))
f.ctrl_entry = add(ProtoField.string("ndma.ctrl.entry", "Member"))
f.ctrl_entry_id = add(ProtoField.uint16("ndma.ctrl.entry.id", "Id", base.DEC))
f.ctrl_entry_family = add(ProtoField.uint8("ndma.ctrl.entry.family", "Address family", base.DEC, { [4] = "IPv4", [6] = "IPv6" }))
f.ctrl_entry_v4 = add(ProtoField.ipv4("ndma.ctrl.entry.ipv4", "Address"))
f.ctrl_entry_v6 = add(ProtoField.ipv6("ndma.ctrl.entry.ipv6", "Address"))
f.ctrl_entry_port = add(ProtoField.uint16("ndma.ctrl.entry.port", "Port", base.DEC))
f.ctrl_range = add(ProtoField.string("ndma.ctrl.range", "Range"))
f.ctrl_range_start = add(ProtoField.uint64("ndma.ctrl.range.start", "Start", base.DEC))
f.ctrl_range_end = add(ProtoField.uint64("ndma.ctrl.range.end", "End", base.DEC))
f.ctrl_range_owner = add(ProtoField.int32("ndma.ctrl.range.owner", "Owner rank", base.DEC))
f.ctrl_range_nrep = add(ProtoField.uint8("ndma.ctrl.range.replicas", "Replicas", base.DEC))
f.ctrl_range_rep = add(ProtoField.int32("ndma.ctrl.range.replica", "Replica rank", base.DEC))
f.ctrl_key = add(ProtoField.uint64("ndma.ctrl.key", "Key", base.HEX))
f.ctrl_capacity = add(ProtoField.uint64("ndma.ctrl.capacity", "Capacity (bytes)", base.DEC))
f.ctrl_node = add(ProtoField.uint16("ndma.ctrl.node", "Node", base.DEC))
f.ctrl_column = add(ProtoField.uint16("ndma.ctrl.column", "Column", base.DEC))
f.ctrl_region = add(ProtoField.uint32("ndma.ctrl.region", "Region", base.DEC))
f.ctrl_pool = add(ProtoField.string("ndma.ctrl.pool", "Pool shape"))
f.ctrl_pool_size = add(ProtoField.uint64("ndma.ctrl.pool.size", "Size (bytes)", base.DEC))
f.ctrl_pool_stripe = add(ProtoField.uint64("ndma.ctrl.pool.stripe", "Stripe (bytes)", base.DEC))
f.ctrl_pool_columns = add(ProtoField.uint16("ndma.ctrl.pool.columns", "Columns", base.DEC))
f.ctrl_pool_replicas = add(ProtoField.uint8("ndma.ctrl.pool.replicas", "Replicas", base.DEC))
f.ctrl_pool_perm = add(ProtoField.uint8("ndma.ctrl.pool.perm", "Permissions", base.HEX))
f.ctrl_perm_r = add(ProtoField.bool("ndma.ctrl.pool.perm.read", "read", 8, nil, 0x01))
f.ctrl_perm_w = add(ProtoField.bool("ndma.ctrl.pool.perm.write", "write", 8, nil, 0x02))
f.ctrl_perm_a = add(ProtoField.bool("ndma.ctrl.pool.perm.atomic", "atomic", 8, nil, 0x04))
f.ctrl_perm_v = add(ProtoField.bool("ndma.ctrl.pool.perm.vector", "vector", 8, nil, 0x08))
f.ctrl_base = add(ProtoField.uint64("ndma.ctrl.base", "Base", base.HEX))
f.ctrl_length = add(ProtoField.uint64("ndma.ctrl.length", "Length (bytes)", base.DEC))
f.ctrl_home_column = add(ProtoField.uint16("ndma.ctrl.home.column", "Column", base.DEC))
f.ctrl_used = add(ProtoField.uint64("ndma.ctrl.used", "Used (bytes)", base.DEC))
f.ctrl_alive = add(ProtoField.uint8("ndma.ctrl.alive", "Alive", base.DEC))
f.ctrl_requests = add(ProtoField.uint64("ndma.ctrl.requests", "Requests forwarded", base.DEC))
f.ctrl_bytes = add(ProtoField.uint64("ndma.ctrl.bytes", "Request bytes forwarded", base.DEC))
f.ctrl_node_name = add(ProtoField.string("ndma.ctrl.node_name", "Credential name"))
f.ctrl_lost = add(ProtoField.uint16("ndma.ctrl.lost", "Lost columns", base.DEC))
f.ctrl_rebuilding_cols = add(ProtoField.uint16("ndma.ctrl.rebuilding_columns", "Rebuilding columns", base.DEC))
f.ctrl_down = add(ProtoField.uint16("ndma.ctrl.down", "Down columns", base.DEC))
f.ctrl_health = add(ProtoField.uint8("ndma.ctrl.health", "Health", base.DEC, health_names))
f.ctrl_refused = add(ProtoField.uint64("ndma.ctrl.refused", "Pool requests refused", base.DEC))
f.ctrl_failed = add(ProtoField.uint8("ndma.ctrl.failed", "Failed", base.DEC))
f.ctrl_final = add(ProtoField.uint8("ndma.ctrl.final", "Final", base.DEC))
f.ctrl_kept = add(ProtoField.uint8("ndma.ctrl.kept", "Kept", base.DEC))
f.ctrl_report = add(ProtoField.string("ndma.ctrl.report", "Grant report"))
f.ctrl_digest = add(ProtoField.bytes("ndma.ctrl.digest", "Key digest"))
f.ctrl_rebuilding = add(ProtoField.uint8("ndma.ctrl.rebuilding", "Rebuilding", base.DEC))
f.ctrl_degraded = add(ProtoField.uint8("ndma.ctrl.degraded", "Degraded", base.DEC))
f.ctrl_joined = add(ProtoField.bytes("ndma.ctrl.joined", "Joined ranks (bit set)"))
f.ctrl_joined_list = add(ProtoField.string("ndma.ctrl.joined.list", "Joined ranks"))
f.ctrl_fragment = add(ProtoField.bytes("ndma.ctrl.fragment", "Control message fragment"))

-- Expert info
local e_malformed = ProtoExpert.new("ndma.malformed", "Malformed NDMA packet", expert.group.MALFORMED, expert.severity.ERROR)
local e_crc = ProtoExpert.new("ndma.crc.bad", "Bad CRC32C", expert.group.CHECKSUM, expert.severity.ERROR)
local e_status = ProtoExpert.new("ndma.status.error", "Refusal status", expert.group.RESPONSE_CODE, expert.severity.NOTE)
local e_ctrl = ProtoExpert.new("ndma.ctrl.malformed", "Malformed control message", expert.group.MALFORMED, expert.severity.ERROR)
local e_encrypted = ProtoExpert.new("ndma.encrypted.note", "Payload encrypted/authenticated", expert.group.SECURITY, expert.severity.NOTE)
local e_retx = ProtoExpert.new("ndma.retx", "Retransmission", expert.group.SEQUENCE, expert.severity.NOTE)
ndma.experts = { e_malformed, e_crc, e_status, e_ctrl, e_encrypted, e_retx }

---------------------------------------------------------------------------
-- CRC32C (Castagnoli, reflected polynomial 0x82F63B78)

local crc_table = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if band(c, 1) ~= 0 then
            c = bxor(rshift(c, 1), 0x82F63B78)
        else
            c = rshift(c, 1)
        end
    end
    crc_table[i] = c
end

local function crc_update(crc, s)
    for i = 1, #s do
        crc = bxor(rshift(crc, 8), crc_table[band(bxor(crc, s:byte(i)), 0xff)])
    end
    return crc
end

-- crc32c of the packet as wire.Seal computes it: the header with the CRC
-- field taken as zero, then the payload (not the tag); of a sealed packet
-- (AUTH) the header alone, the tag covering the payload.
local function packet_crc(tvb, end_off, sealed)
    local crc = 0xffffffff
    crc = crc_update(crc, tvb:raw(0, 92))
    crc = crc_update(crc, "\0\0\0\0")
    if not sealed and end_off > HEADER_LEN then
        crc = crc_update(crc, tvb:raw(HEADER_LEN, end_off - HEADER_LEN))
    end
    return bxor(crc, 0xffffffff) % 4294967296
end

---------------------------------------------------------------------------
-- Helpers

local function u64num(r) return r:uint64():tonumber() end

local function addr_string(tvb, off, v6)
    if v6 then
        return tostring(tvb(off, 16):ipv6())
    end
    return tostring(tvb(off, 4):ipv4())
end

-- A cursor over a control message body; reads past its end raise an error
-- that dissect_ctrl catches and reports as malformed.
local Cursor = {}
Cursor.__index = Cursor

local function new_cursor(tvb, off, len)
    return setmetatable({ tvb = tvb, off = off, stop = off + len }, Cursor)
end

local TRUNC = {}

function Cursor:need(n)
    if self.off + n > self.stop then
        error(TRUNC)
    end
end

function Cursor:range(n)
    self:need(n)
    local r = self.tvb(self.off, n)
    self.off = self.off + n
    return r
end

function Cursor:left() return self.stop - self.off end

-- field adds an n-byte field and returns its range.
function Cursor:field(tree, f, n)
    local r = self:range(n)
    tree:add(f, r)
    return r
end

function Cursor:u8(tree, f) return self:field(tree, f, 1):uint() end
function Cursor:u16(tree, f) return self:field(tree, f, 2):uint() end
function Cursor:u32(tree, f) return self:field(tree, f, 4):uint() end
function Cursor:u64(tree, f) return self:field(tree, f, 8):uint64() end

-- rank: u16, 0xFFFF = any rank.
function Cursor:rank(tree)
    local r = self:range(2)
    local it = tree:add(f.ctrl_rank, r)
    if r:uint() == 0xffff then
        it:append_text(" (any)")
    end
    return r:uint()
end

-- optional name: u8 length (0..64), then the bytes.
function Cursor:optname(tree, f)
    local n = self:range(1):uint()
    if n > 64 then
        error(string.format("name length %d above 64", n))
    end
    if n == 0 then
        return ""
    end
    local r = self:range(n)
    tree:add(f, r, r:string())
    return r:string()
end

function Cursor:name(tree, f)
    local n = self:range(1):uint()
    if n < 1 or n > 64 then
        error(string.format("name length %d not in 1..64", n))
    end
    local r = self:range(n)
    tree:add(f, r, r:string())
    return r:string()
end

-- member entry: u16 id, u8 family, 4 or 16 address bytes, u16 port.
function Cursor:member(tree, label, idfield)
    self:need(3)
    local fam = self.tvb(self.off + 2, 1):uint()
    if fam ~= 4 and fam ~= 6 then
        error(string.format("address family %d", fam))
    end
    local alen = (fam == 4) and 4 or 16
    local n = 5 + alen
    self:need(n)
    local start = self.off
    local id = self.tvb(start, 2):uint()
    local a = addr_string(self.tvb, start + 3, fam == 6)
    local port = self.tvb(start + 3 + alen, 2):uint()
    local shown = (fam == 6) and string.format("[%s]:%d", a, port) or string.format("%s:%d", a, port)
    local t = tree:add(f.ctrl_entry, self.tvb(start, n), shown)
    t:set_text(string.format("%s %d: %s", label, id, shown))
    t:add(idfield or f.ctrl_entry_id, self.tvb(start, 2))
    t:add(f.ctrl_entry_family, self.tvb(start + 2, 1))
    t:add((fam == 4) and f.ctrl_entry_v4 or f.ctrl_entry_v6, self.tvb(start + 3, alen))
    t:add(f.ctrl_entry_port, self.tvb(start + 3 + alen, 2))
    self.off = start + n
    return t, shown
end

function Cursor:count(tree, limit, what)
    local r = self:range(2)
    local n = r:uint()
    tree:add(f.ctrl_count, r):set_text(string.format("%s: %d", what, n))
    if n > limit then
        error(string.format("count %d > %d", n, limit))
    end
    return n
end

-- pool shape: u64 size, u64 stripe, u16 columns, u8 replicas, u8 perm.
function Cursor:pool(tree)
    self:need(20)
    local start = self.off
    local size = self.tvb(start, 8):uint64()
    local cols = self.tvb(start + 16, 2):uint()
    local reps = self.tvb(start + 18, 1):uint()
    local t = tree:add(f.ctrl_pool, self.tvb(start, 20),
        string.format("size %s, stripe %s, %d columns, %d replicas", tostring(size),
            tostring(self.tvb(start + 8, 8):uint64()), cols, reps))
    self:u64(t, f.ctrl_pool_size)
    self:u64(t, f.ctrl_pool_stripe)
    self:u16(t, f.ctrl_pool_columns)
    self:u8(t, f.ctrl_pool_replicas)
    local pr = self:range(1)
    local pt = t:add(f.ctrl_pool_perm, pr)
    pt:add(f.ctrl_perm_r, pr)
    pt:add(f.ctrl_perm_w, pr)
    pt:add(f.ctrl_perm_a, pr)
    pt:add(f.ctrl_perm_v, pr)
    return cols
end

-- fences: u16 count, then u32 id and u64 token each.
function Cursor:fences(tree)
    local n = self:count(tree, 1024, "Fences")
    for _ = 1, n do
        self:need(12)
        local start = self.off
        local t = tree:add(f.fence, self.tvb(start, 12),
            string.format("Fence %d: token 0x%s", self.tvb(start, 4):uint(), self.tvb(start + 4, 8):uint64():tohex()))
        self:u32(t, f.fence_id)
        self:u64(t, f.fence_token)
    end
    return n
end

function Cursor:homes(tree, columns)
    for _ = 1, columns do
        local start = self.off
        local t = self:member(tree, "Home of column", f.ctrl_home_column)
        self:u64(t, f.ctrl_base)
        t:set_len(self.off - start)
    end
end

-- range: u64 start, u64 end, i32 owner, u8 count, count × i32.
function Cursor:keyrange(tree)
    local start = self.off
    local t = tree:add(f.ctrl_range, self.tvb(start, 1), "")
    local s = self:u64(t, f.ctrl_range_start)
    local e = self:u64(t, f.ctrl_range_end)
    local owner = self:field(t, f.ctrl_range_owner, 4):int()
    local n = self:u8(t, f.ctrl_range_nrep)
    if n > 8 then
        error(string.format("%d replicas > 8", n))
    end
    for _ = 1, n do
        self:field(t, f.ctrl_range_rep, 4)
    end
    t:set_len(self.off - start)
    t:set_text(string.format("Range [%s, %s) owner %d, %d replicas", tostring(s), tostring(e), owner, n))
end

---------------------------------------------------------------------------
-- Control messages

-- ctrl_fields decodes the fields of type typ (request or response) at c
-- into t and returns a short summary for the Info column.
local function ctrl_fields(c, t, typ, resp)
    if (typ == 1 or typ == 23) and not resp then -- JOIN, JOINVIA
        local job = c:name(t, f.ctrl_job)
        local size = c:u16(t, f.ctrl_size)
        local rank = c:rank(t)
        c:u16(t, f.ctrl_mtu)
        local via = ""
        if typ == 23 then
            local n = c:count(t, 1, "Joiner")
            for _ = 1, n do c:member(t, "Joiner") end
            via = string.format(" joiners=%d", n)
        end
        return string.format("job=%s size=%d rank=%s%s", job, size, rank == 0xffff and "any" or tostring(rank), via)
    elseif typ == 1 or typ == 23 then
        local g = c:u32(t, f.ctrl_group)
        local m = c:u16(t, f.ctrl_member)
        c:u64(t, f.ctrl_epoch)
        local n = c:count(t, 4096, "Members")
        for _ = 1, n do c:member(t, "Member") end
        return string.format("group=%d member=%d members=%d", g, m, n)
    elseif (typ == 2 or typ == 4 or typ == 24) and not resp then -- LEAVE, HEARTBEAT, MEMBERGONE
        local g = c:u32(t, f.ctrl_group)
        local m = c:u16(t, f.ctrl_member)
        return string.format("group=%d member=%d", g, m)
    elseif typ == 3 and not resp then -- DESTROY
        return string.format("group=%d", c:u32(t, f.ctrl_group))
    elseif typ == 4 then
        c:u64(t, f.ctrl_epoch)
        local n = c:count(t, 4096, "Dead members")
        for _ = 1, n do c:u16(t, f.ctrl_dead) end
        return string.format("dead=%d", n)
    elseif typ == 5 and not resp then -- REGISTER
        local svc = c:name(t, f.ctrl_service)
        c:u8(t, f.ctrl_policy)
        c:u16(t, f.ctrl_size)
        c:rank(t)
        local n = c:count(t, 4096, "Ranges")
        for _ = 1, n do c:keyrange(t) end
        c:u16(t, f.ctrl_mtu)
        return "service=" .. svc
    elseif typ == 5 then
        local g = c:u32(t, f.ctrl_group)
        local m = c:u16(t, f.ctrl_member)
        return string.format("group=%d member=%d", g, m)
    elseif typ == 6 and not resp then -- LOOKUP
        local svc = c:name(t, f.ctrl_service)
        c:u16(t, f.ctrl_mtu)
        return "service=" .. svc
    elseif typ == 6 then
        local g = c:u32(t, f.ctrl_group)
        local n = c:count(t, 4096, "Members")
        for _ = 1, n do c:member(t, "Member") end
        return string.format("group=%d members=%d", g, n)
    elseif typ == 7 and not resp then -- POOLNODE
        c:u64(t, f.ctrl_key)
        local cap = c:u64(t, f.ctrl_capacity)
        c:u64(t, f.ctrl_epoch)
        c:u8(t, f.ctrl_kept)
        return "capacity=" .. tostring(cap)
    elseif typ == 7 then
        local n = c:u16(t, f.ctrl_node)
        c:u64(t, f.ctrl_epoch)
        return string.format("node=%d", n)
    elseif typ == 8 and not resp then -- POOLCREATE
        c:pool(t)
        return ""
    elseif typ == 8 then
        local r = c:u32(t, f.ctrl_region)
        c:u64(t, f.ctrl_key)
        c:pool(t)
        return string.format("region=%d", r)
    elseif (typ == 9 or typ == 10 or typ == 13) and not resp then -- POOLOPEN, POOLFREE, POOLREVOKE
        local r = c:u32(t, f.ctrl_region)
        c:u64(t, f.ctrl_key)
        return string.format("region=%d", r)
    elseif typ == 9 then
        c:pool(t)
        return ""
    elseif typ == 11 and resp then -- POOLSTAT
        local n = c:count(t, 1024, "Pool nodes")
        for _ = 1, n do
            local start = c.off
            local nt = c:member(t, "Pool node")
            c:u64(nt, f.ctrl_capacity)
            c:u64(nt, f.ctrl_used)
            c:u8(nt, f.ctrl_alive)
            c:u64(nt, f.ctrl_requests)
            c:u64(nt, f.ctrl_bytes)
            c:optname(nt, f.ctrl_node_name)
            nt:set_len(c.off - start)
        end
        local m = c:count(t, 4096, "Pool regions")
        for _ = 1, m do
            local start = c.off
            local rt = t:add(f.ctrl_pool, c.tvb(start, 1), "")
            local r = c:u32(rt, f.ctrl_region)
            c:pool(rt)
            c:u16(rt, f.ctrl_lost)
            c:u16(rt, f.ctrl_rebuilding_cols)
            c:u16(rt, f.ctrl_down)
            c:u8(rt, f.ctrl_health)
            rt:set_len(c.off - start)
            rt:set_text(string.format("Region %d", r))
        end
        c:u64(t, f.ctrl_refused)
        return string.format("nodes=%d regions=%d", n, m)
    elseif (typ == 12 or typ == 14) and not resp then -- POOLGRANT, POOLREBUILD
        local r = c:u32(t, f.ctrl_region)
        c:u64(t, f.ctrl_key)
        local cols = c:pool(t)
        c:u64(t, f.ctrl_base)
        c:u64(t, f.ctrl_length)
        local col = c:u16(t, f.ctrl_column)
        c:u64(t, f.ctrl_epoch)
        c:homes(t, cols)
        c:fences(t)
        return string.format("region=%d column=%d", r, col)
    elseif (typ == 15 or typ == 16 or (typ >= 20 and typ <= 22)) and not resp then
        -- POOLREBUILDGO, POOLREBUILT, POOLCOLUMNLOST, POOLCOLUMNGRANT, POOLCOLUMNRESTORED
        local r = c:u32(t, f.ctrl_region)
        c:u64(t, f.ctrl_key)
        local col = c:u16(t, f.ctrl_column)
        if typ == 16 then
            c:u8(t, f.ctrl_failed)
        end
        return string.format("region=%d column=%d", r, col)
    elseif typ == 17 and not resp then -- JOINSTATUS
        return "job=" .. c:name(t, f.ctrl_job)
    elseif typ == 17 then
        local size = c:u16(t, f.ctrl_size)
        local nb = math.floor((size + 7) / 8)
        local ranks = {}
        if nb > 0 then
            local r = c:field(t, f.ctrl_joined, nb)
            for i = 0, nb - 1 do
                local b = r(i, 1):uint()
                for j = 0, 7 do
                    if band(b, 2 ^ j) ~= 0 then
                        ranks[#ranks + 1] = tostring(8 * i + j)
                    end
                end
            end
            t:add(f.ctrl_joined_list, r, table.concat(ranks, ","))
        end
        return string.format("size=%d joined=%d", size, #ranks)
    elseif typ == 18 and not resp then -- POOLREPORT
        c:u8(t, f.ctrl_final)
        local n = c:count(t, 4096, "Grant reports")
        for _ = 1, n do
            local start = c.off
            local rt = t:add(f.ctrl_report, c.tvb(start, 1), "")
            local r = c:u32(rt, f.ctrl_region)
            local col = c:u16(rt, f.ctrl_column)
            local cols = c:pool(rt)
            c:u64(rt, f.ctrl_base)
            c:u64(rt, f.ctrl_length)
            c:u64(rt, f.ctrl_epoch)
            c:field(rt, f.ctrl_digest, 16)
            c:u64(rt, f.ctrl_key)
            c:u8(rt, f.ctrl_rebuilding)
            c:u8(rt, f.ctrl_degraded)
            c:homes(rt, cols)
            c:fences(rt)
            rt:set_len(c.off - start)
            rt:set_text(string.format("Grant report: region %d column %d", r, col))
        end
        return string.format("reports=%d", n)
    elseif typ == 19 and not resp then -- POOLEPOCH
        local r = c:u32(t, f.ctrl_region)
        c:u64(t, f.ctrl_key)
        c:u64(t, f.ctrl_epoch)
        return string.format("region=%d", r)
    end
    -- Every other type and direction has no fields.
    return ""
end

-- dissect_ctrl decodes the control message in tvb[off, off+len) and
-- returns a summary for the Info column.
local function dissect_ctrl(tvb, pinfo, tree, off, len)
    local t = tree:add(f.ctrl, tvb(off, len), "")
    if len < CTRL_TAG_LEN + 2 then
        t:set_text("Control message (malformed)")
        t:add_proto_expert_info(e_ctrl, string.format("%d bytes: too short for type, flags and tag", len))
        return "malformed"
    end
    local typ = tvb(off, 1):uint()
    local flags = tvb(off + 1, 1):uint()
    local resp = band(flags, 1) ~= 0
    local tname = name_of(ctrl_names, typ, "ctrl")
    t:set_text(string.format("Control message: %s %s", tname, resp and "response" or "request"))
    t:add(f.ctrl_type, tvb(off, 1))
    local ft = t:add(f.ctrl_flags, tvb(off + 1, 1))
    ft:add(f.ctrl_resp, tvb(off + 1, 1))
    if band(flags, 0xfe) ~= 0 then
        ft:add_proto_expert_info(e_ctrl, string.format("unknown control flags 0x%02x", flags))
    end
    local body = len - CTRL_TAG_LEN
    local summary = tname
    if not ctrl_names[typ] then
        t:add_proto_expert_info(e_ctrl, string.format("unknown control type %d", typ))
    else
        local c = new_cursor(tvb, off + 2, body - 2)
        local ok, res = pcall(ctrl_fields, c, t, typ, resp)
        if not ok then
            local why = (res == TRUNC) and "truncated field" or tostring(res)
            t:add_proto_expert_info(e_ctrl, tname .. ": " .. why)
            summary = summary .. " (malformed)"
        else
            if res ~= "" then
                summary = summary .. " " .. res
            end
            if c:left() > 0 then
                t:add_proto_expert_info(e_ctrl, string.format("%d bytes after the fields", c:left()))
            end
        end
    end
    t:add(f.ctrl_tag, tvb(off + body, CTRL_TAG_LEN))
    return summary
end

---------------------------------------------------------------------------
-- Payloads

local function dissect_ack(tvb, tree, off, len)
    local t = tree:add(f.ack, tvb(off, len))
    if len < ACK_FIXED_LEN then
        t:add_proto_expert_info(e_malformed, string.format("ACK frame of %d bytes, shorter than %d", len, ACK_FIXED_LEN))
        return ""
    end
    local cum = tvb(off, 4):uint()
    t:add(f.ack_cum, tvb(off, 4))
    t:add(f.ack_window, tvb(off + 4, 4))
    t:add(f.ack_echots, tvb(off + 8, 8))
    t:add(f.ack_delay, tvb(off + 16, 4))
    local nb = tvb(off + 20, 1):uint()
    t:add(f.ack_nblocks, tvb(off + 20, 1))
    t:add(f.ack_qdelay, tvb(off + 21, 3))
    if nb > MAX_SACK then
        t:add_proto_expert_info(e_malformed, string.format("%d SACK blocks > %d", nb, MAX_SACK))
    end
    if len ~= ACK_FIXED_LEN + 8 * nb then
        t:add_proto_expert_info(e_malformed, string.format("ACK frame of %d bytes, want %d for %d blocks", len, ACK_FIXED_LEN + 8 * nb, nb))
    end
    local blocks = {}
    for i = 0, nb - 1 do
        local b = off + ACK_FIXED_LEN + 8 * i
        if b + 8 > off + len then break end
        local s, e = tvb(b, 4):uint(), tvb(b + 4, 4):uint()
        local bt = t:add(f.sack, tvb(b, 8), string.format("[%d, %d)", s, e))
        bt:add(f.sack_start, tvb(b, 4))
        bt:add(f.sack_end, tvb(b + 4, 4))
        -- Serial-number order (RFC 1982): cum < s < e, within 2^31.
        local ds, de = (s - cum) % 4294967296, (e - cum) % 4294967296
        if ds == 0 or ds >= 2147483648 or de <= ds or de > 2147483648 then
            bt:add_proto_expert_info(e_malformed, "SACK block not above the cumulative ACK, or empty")
        end
        blocks[#blocks + 1] = string.format("%d-%d", s, e)
    end
    local s = string.format("cum=%d", cum)
    if #blocks > 0 then
        s = s .. " sack=" .. table.concat(blocks, ",")
    end
    return s
end

-- dissect_replyto shows the 18-byte trailer at off and returns it as text.
local function dissect_replyto(tvb, tree, off)
    local mapped = tvb(off, 10):bytes():tohex() == "00000000000000000000" and tvb(off + 10, 2):uint() == 0xffff
    local port = tvb(off + 16, 2):uint()
    local shown
    if mapped then
        shown = string.format("%s:%d", tostring(tvb(off + 12, 4):ipv4()), port)
    else
        shown = string.format("[%s]:%d", tostring(tvb(off, 16):ipv6()), port)
    end
    local t = tree:add(f.replyto, tvb(off, REPLYTO_LEN), shown)
    if mapped then
        t:add(f.replyto_v4, tvb(off + 12, 4))
    else
        t:add(f.replyto_v6, tvb(off, 16))
    end
    t:add(f.replyto_port, tvb(off + 16, 2))
    if port == 0 or (not mapped and tvb(off, 16):bytes():tohex() == "00000000000000000000000000000000") or
        (mapped and tvb(off + 12, 4):uint() == 0) then
        t:add_proto_expert_info(e_malformed, "reply-to names no usable address")
    end
    return shown
end

local function dissect_chain(tvb, tree, off, len, nhops, hop)
    local n = nhops
    if n < 1 or n > 16 or n * CHAIN_HOP_LEN > len then
        tree:add_proto_expert_info(e_malformed, string.format("chain of %d hops in %d payload bytes", n, len))
        tree:add(f.payload, tvb(off, len))
        return
    end
    for i = 0, n - 1 do
        local b = off + i * CHAIN_HOP_LEN
        local op = tvb(b + 8, 1):uint()
        local coef = tvb(b + 9, 1):uint()
        local text = string.format("%s at 0x%s%s%s", name_of(chainop_names, op, "chainop"), tvb(b, 8):uint64():tohex(),
            op == CHAIN_GFACCUMULATE and string.format(" ×0x%02x", coef) or "", i == hop and " (current)" or "")
        local ht = tree:add(f.chain_hop, tvb(b, CHAIN_HOP_LEN), text)
        ht:set_text(string.format("Hop %d: %s", i, text))
        ht:add(f.chain_addr, tvb(b, 8))
        ht:add(f.chain_op, tvb(b + 8, 1))
        ht:add(f.chain_coef, tvb(b + 9, 1))
        ht:add(f.chain_pad, tvb(b + 10, 6))
        if not chainop_names[op] or tvb(b + 10, 6):bytes():tohex() ~= "000000000000" then
            ht:add_proto_expert_info(e_malformed, "unknown chain op or non-zero padding")
        elseif (op == CHAIN_GFACCUMULATE) ~= (coef ~= 0) then
            ht:add_proto_expert_info(e_malformed, "coefficient on an op other than GFACCUMULATE, or GFACCUMULATE with coefficient 0")
        end
    end
    local d = n * CHAIN_HOP_LEN
    if len > d then
        tree:add(f.chain_data, tvb(off + d, len - d))
    end
end

local function dissect_optim(tvb, tree, off, len)
    if len < OPTIM_PARAMS_LEN then
        tree:add_proto_expert_info(e_malformed, string.format("optimizer payload of %d bytes, shorter than its %d-byte parameters", len, OPTIM_PARAMS_LEN))
        tree:add(f.payload, tvb(off, len))
        return
    end
    tree:add(f.optim_algo, tvb(off, 1))
    tree:add(f.optim_step, tvb(off + 4, 4))
    tree:add(f.optim_lr, tvb(off + 8, 4))
    tree:add(f.optim_beta1, tvb(off + 12, 4))
    tree:add(f.optim_beta2, tvb(off + 16, 4))
    tree:add(f.optim_eps, tvb(off + 20, 4))
    tree:add(f.optim_wd, tvb(off + 24, 4))
    if len > OPTIM_PARAMS_LEN then
        tree:add(f.optim_grad, tvb(off + OPTIM_PARAMS_LEN, len - OPTIM_PARAMS_LEN))
    end
end

---------------------------------------------------------------------------
-- The packet

-- looks_like_ndma is the heuristic: version 1, a known opcode, mode and
-- flags, the datagram exactly as long as the header says, and (unless the
-- packet carries an authentication tag, whose AEAD may replace it) a CRC
-- that matches.
local function looks_like_ndma(tvb)
    local n = tvb:len()
    if n < HEADER_LEN or tvb(0, 1):uint() ~= 1 then
        return false
    end
    local op = tvb(1, 1):uint()
    local mode = tvb(2, 1):uint()
    local flags = tvb(3, 1):uint()
    if not op_names[op] or mode > 4 or band(flags, 0xc0) ~= 0 then
        return false
    end
    if band(flags, FLAG_AUTH) == 0 and (tvb(88, 4):uint() ~= 0 or tvb(12, 4):uint() ~= 0) then
        return false
    end
    local plen = tvb(40, 2):uint()
    local total = HEADER_LEN + plen
    if band(flags, FLAG_AUTH) ~= 0 then
        total = total + TAG_LEN
    end
    if n ~= total then
        return false
    end
    return packet_crc(tvb, HEADER_LEN + plen, band(flags, FLAG_AUTH) ~= 0) == tvb(92, 4):uint()
end

local function dissect(tvb, pinfo, root)
    local n = tvb:len()
    pinfo.cols.protocol:set("NDMA")
    local tree = root:add(ndma, tvb(), "NDMA")
    if n < HEADER_LEN then
        tree:add_proto_expert_info(e_malformed, string.format("datagram of %d bytes, shorter than the %d-byte header", n, HEADER_LEN))
        pinfo.cols.info:set(string.format("Malformed NDMA (%d bytes)", n))
        return n
    end
    local version = tvb(0, 1):uint()
    local op = tvb(1, 1):uint()
    local mode = tvb(2, 1):uint()
    local flags = tvb(3, 1):uint()
    local plen = tvb(40, 2):uint()
    local status = tvb(42, 1):uint()
    local resp = band(flags, FLAG_RESP) ~= 0
    local auth = band(flags, FLAG_AUTH) ~= 0
    local opname = name_of(op_names, op, "op")
    local modename = name_of(mode_names, mode, "mode")

    local vt = tree:add(f.version, tvb(0, 1))
    if version ~= 1 then
        vt:add_proto_expert_info(e_malformed, string.format("unsupported version %d", version))
    end
    local ot = tree:add(f.op, tvb(1, 1))
    if not op_names[op] then
        ot:add_proto_expert_info(e_malformed, string.format("unknown opcode 0x%02x", op))
    end
    local mt = tree:add(f.mode, tvb(2, 1))
    if mode > 4 then
        mt:add_proto_expert_info(e_malformed, string.format("unknown mode %d", mode))
    elseif (op == OP_CHAIN or op == OP_OPTIM or op == OP_FENCE) and mode ~= MODE_POOL then
        mt:add_proto_expert_info(e_malformed, opname .. " outside pool mode")
    end
    local fnames = {}
    if resp then fnames[#fnames + 1] = "RESP" end
    if auth then fnames[#fnames + 1] = "AUTH" end
    if band(flags, FLAG_RETX) ~= 0 then fnames[#fnames + 1] = "RETX" end
    if band(flags, FLAG_SYN) ~= 0 then fnames[#fnames + 1] = "SYN" end
    if band(flags, FLAG_REPLYTO) ~= 0 then fnames[#fnames + 1] = "REPLYTO" end
    if band(flags, FLAG_ACK) ~= 0 then fnames[#fnames + 1] = "ACK" end
    if band(flags, FLAG_FENCE) ~= 0 then fnames[#fnames + 1] = "FENCE" end
    local ft = tree:add(f.flags, tvb(3, 1))
    ft:append_text(" (" .. (#fnames > 0 and table.concat(fnames, ", ") or "none") .. ")")
    ft:add(f.flag_resp, tvb(3, 1))
    ft:add(f.flag_auth, tvb(3, 1))
    ft:add(f.flag_retx, tvb(3, 1))
    ft:add(f.flag_syn, tvb(3, 1))
    ft:add(f.flag_replyto, tvb(3, 1))
    ft:add(f.flag_ack, tvb(3, 1))
    ft:add(f.flag_fence, tvb(3, 1))
    ft:add(f.flag_rsvd, tvb(3, 1))
    if band(flags, 0x80) ~= 0 then
        ft:add_proto_expert_info(e_malformed, string.format("unknown flags 0x%02x", band(flags, 0x80)))
    end
    if band(flags, FLAG_RETX) ~= 0 then
        ft:add_proto_expert_info(e_retx)
    end
    local gt = tree:add(f.group, tvb(4, 4))
    if mode == MODE_POOL then
        gt:append_text(" (pool region)")
    end
    for _, m in ipairs({ { f.src, 8 }, { f.dst, 10 } }) do
        local it = tree:add(m[1], tvb(m[2], 2))
        if tvb(m[2], 2):uint() == 0xffff then
            it:append_text(" (all members / the forwarding node)")
        end
    end
    tree:add(f.said, tvb(12, 4))
    tree:add(f.psn, tvb(16, 4))
    tree:add(f.ackbase, tvb(20, 4))
    tree:add(f.msgid, tvb(24, 8))
    tree:add(f.offset, tvb(32, 4))
    tree:add(f.msglen, tvb(36, 4))
    tree:add(f.len, tvb(40, 2))
    local st = tree:add(f.status, tvb(42, 1))
    if status ~= 0 then
        st:add_proto_expert_info(e_status, "status " .. name_of(status_names, status, "status"))
    end
    tree:add(f.dtype, tvb(43, 1))
    tree:add(f.alu, tvb(44, 1))
    local hop = tvb(45, 1):uint()
    local ht = tree:add(f.hop, tvb(45, 1))
    if hop ~= 0 and op ~= OP_CHAIN then
        ht:add_proto_expert_info(e_malformed, "hop not zero outside a chain")
    end
    local copies = tvb(46, 2):uint()
    local ct = tree:add(f.copies, tvb(46, 2))
    if mode == MODE_POOL then
        ct:add(f.copies_n, tvb(46, 2))
        ct:add(f.copies_deg, tvb(46, 2))
    elseif copies ~= 0 then
        ct:add_proto_expert_info(e_malformed, "copies not zero outside pool mode")
    end
    tree:add(f.addr, tvb(48, 8))
    if mode == MODE_ANYCAST and not resp then
        tree:add(f.caller, tvb(56, 8))
    else
        tree:add(f.key, tvb(56, 8))
    end
    tree:add(f.operand1, tvb(64, 8))
    tree:add(f.operand2, tvb(72, 8))
    tree:add(f.ts, tvb(80, 8))
    local rt = tree:add(f.saseq, tvb(88, 4))
    if not auth and (tvb(88, 4):uint() ~= 0 or tvb(12, 4):uint() ~= 0) then
        rt:add_proto_expert_info(e_malformed, "SA id or sequence not zero without AUTH")
    end

    -- Lengths
    local payload_end = HEADER_LEN + plen
    local total = payload_end + (auth and TAG_LEN or 0)
    -- The summary (Info column): what, details of the payload, then the
    -- header fields that identify it.
    local what = opname .. (resp and " response" or "")
    local shown_flags = {}
    for _, fl in ipairs(fnames) do
        if fl ~= "RESP" and fl ~= "AUTH" then
            shown_flags[#shown_flags + 1] = fl
        end
    end
    if #shown_flags > 0 then
        what = what .. " [" .. table.concat(shown_flags, ",") .. "]"
    end
    local detail = {}
    local info = {}
    if mode ~= 0 then
        info[#info + 1] = modename
    end
    local ok_len = true
    if n < total then
        tree:add_proto_expert_info(e_malformed, string.format("datagram of %d bytes, shorter than the %d its header announces", n, total))
        ok_len = false
    elseif n > total then
        tree:add_proto_expert_info(e_malformed, string.format("datagram of %d bytes, longer than the %d its header announces", n, total))
        tree:add(f.trailing, tvb(total, n - total))
    end
    local offset = tvb(32, 4):uint()
    local msglen = tvb(36, 4):uint()
    if op >= 0x01 and op <= 0x0c and offset + plen > msglen then
        tree:add_proto_expert_info(e_malformed, string.format("offset %d + length %d > message length %d", offset, plen, msglen))
    end

    -- CRC
    local crct = tree:add(f.crc, tvb(92, 4))
    if ok_len then
        local want = packet_crc(tvb, payload_end, band(flags, FLAG_AUTH) ~= 0)
        if want == tvb(92, 4):uint() then
            crct:add(f.crc_status, tvb(92, 4), "good")
            crct:append_text(" [correct]")
        else
            crct:add(f.crc_status, tvb(92, 4), "bad")
            crct:append_text(string.format(" [incorrect, should be 0x%08x]", want))
            crct:add_proto_expert_info(e_crc, string.format("CRC32C 0x%08x, computed 0x%08x", tvb(92, 4):uint(), want))
        end
    else
        crct:add(f.crc_status, tvb(92, 4), "unverified")
    end

    if op ~= OP_ACK and op ~= OP_NACK then
        info[#info + 1] = "msg=" .. tostring(tvb(24, 8):uint64())
        if mode ~= MODE_POOL then
            info[#info + 1] = string.format("psn=%d", tvb(16, 4):uint())
        end
    end
    if tvb(4, 4):uint() ~= 0 then
        info[#info + 1] = string.format(mode == MODE_POOL and "region=%d" or "group=%d", tvb(4, 4):uint())
    end
    if resp or status ~= 0 then
        info[#info + 1] = "status=" .. name_of(status_names, status, "status")
    end

    -- Payload
    local avail = math.min(plen, math.max(n - HEADER_LEN, 0))
    if auth then
        detail[#detail + 1] = string.format("SA=0x%08x encrypted", tvb(12, 4):uint())
        if avail > 0 then
            local et = tree:add(f.encrypted, tvb(HEADER_LEN, avail))
            et:add_proto_expert_info(e_encrypted, string.format("payload of %d bytes encrypted/authenticated under SA 0x%08x", avail, tvb(12, 4):uint()))
        else
            tree:add_proto_expert_info(e_encrypted, string.format("header authenticated under SA 0x%08x", tvb(12, 4):uint()))
        end
        if ok_len then
            tree:add(f.tag, tvb(payload_end, TAG_LEN))
        end
    elseif avail > 0 then
        local poff, pl = HEADER_LEN, avail
        local replyto, riding
        if band(flags, FLAG_ACK) ~= 0 then
            -- Streams with an engine at each end: the point-to-point
            -- group, anycast and aggregation.
            local e2e = mode == MODE_ANYCAST or mode == MODE_AGGREGATE or (mode == MODE_UNICAST and tvb(4, 4):uint() == 0)
            if not e2e or op == OP_ACK or op == OP_NACK or avail < ACK_FIXED_LEN then
                tree:add_proto_expert_info(e_malformed, "ACK flag outside the point-to-point group's, anycast or aggregation data, or without room for the frame")
            else
                pl = avail - ACK_FIXED_LEN
                riding = HEADER_LEN + pl
            end
        end
        if band(flags, FLAG_REPLYTO) ~= 0 then
            if mode ~= MODE_POOL or avail < REPLYTO_LEN then
                tree:add_proto_expert_info(e_malformed, "REPLYTO flag outside pool mode or without room for the trailer")
            else
                pl = avail - REPLYTO_LEN
                replyto = HEADER_LEN + pl
            end
        end
        local fence
        if band(flags, FLAG_FENCE) ~= 0 then
            local fenceable = op == OP_WRITE or op == OP_CAS or op == OP_FADD or op == OP_VECTOR or op == OP_CHAIN or op == OP_FENCE
            if mode ~= MODE_POOL or resp or not fenceable or pl < FENCE_LEN then
                tree:add_proto_expert_info(e_malformed, "FENCE flag outside a pool WRITE, CAS, FETCHADD, VECTOR, CHAIN or FENCE request, or without room for the trailer")
            else
                pl = pl - FENCE_LEN
                fence = HEADER_LEN + pl
            end
        elseif op == OP_FENCE and not resp then
            tree:add_proto_expert_info(e_malformed, "FENCE request without its fence trailer")
        end
        if pl > 0 then
            if op == OP_ACK or op == OP_NACK then
                local s = dissect_ack(tvb, tree, poff, pl)
                if s ~= "" then detail[#detail + 1] = s end
            elseif op == OP_CONTROL then
                if offset == 0 and pl == msglen then
                    detail[#detail + 1] = dissect_ctrl(tvb, pinfo, tree, poff, pl)
                else
                    tree:add(f.ctrl_fragment, tvb(poff, pl)):append_text(string.format(" (bytes %d..%d of %d)", offset, offset + pl, msglen))
                    detail[#detail + 1] = string.format("fragment %d+%d/%d", offset, pl, msglen)
                end
            elseif op == OP_CHAIN and mode == MODE_POOL then
                dissect_chain(tvb, tree, poff, pl, u64num(tvb(72, 8)), hop)
            elseif op == OP_OPTIM and mode == MODE_POOL and not resp then
                dissect_optim(tvb, tree, poff, pl)
            else
                tree:add(f.payload, tvb(poff, pl))
            end
        end
        if fence then
            local id, token = tvb(fence, 4):uint(), tvb(fence + 4, 8):uint64()
            local t = tree:add(f.fence, tvb(fence, FENCE_LEN), string.format("id %d, token 0x%s", id, token:tohex()))
            t:add(f.fence_id, tvb(fence, 4))
            t:add(f.fence_token, tvb(fence + 4, 8))
            if token == UInt64(0) then
                t:add_proto_expert_info(e_malformed, "fence token 0")
            end
            info[#info + 1] = string.format("fence=%d/0x%s", id, token:tohex())
        end
        if replyto then
            info[#info + 1] = "reply-to=" .. dissect_replyto(tvb, tree, replyto)
        end
        if riding then
            info[#info + 1] = "ack " .. dissect_ack(tvb, tree, riding, ACK_FIXED_LEN)
        end
    elseif (op == OP_ACK or op == OP_NACK) then
        tree:add_proto_expert_info(e_malformed, "ACK packet without an ACK frame")
    end
    if not auth and plen > 0 and op ~= OP_ACK and op ~= OP_NACK and op ~= OP_CONTROL then
        info[#info + 1] = string.format("len=%d", plen)
    end
    if op == OP_EVENT then
        local sname = name_of(status_names, status, "status")
        local text
        if resp then
            text = string.format("aggregation %s refused: %s", tostring(tvb(72, 8):uint64()), sname)
            if status == 9 then
                text = text .. string.format(" (member %s)", tostring(tvb(64, 8):uint64()))
            end
        else
            text = string.format("%s member %s", sname, tostring(tvb(64, 8):uint64()))
            if status == 9 and u64num(tvb(72, 8)) == 1 then
                text = text .. " (left)"
            end
        end
        tree:add(f.event, tvb(42, 1), text)
        detail[#detail + 1] = text
    elseif op == OP_DATA and mode == MODE_AGGREGATE and not resp and tvb(10, 2):uint() ~= 0xffff then
        local r = u64num(tvb(64, 8))
        info[#info + 1] = (r == 0) and "to all" or string.format("root=%d", r - 1)
    end

    local summary = what
    if #detail > 0 then
        summary = summary .. " " .. table.concat(detail, " ")
    end
    if #info > 0 then
        summary = summary .. " " .. table.concat(info, " ")
    end
    tree:append_text(", " .. summary)
    pinfo.cols.info:set(summary)
    return n
end

function ndma.dissector(tvb, pinfo, tree)
    return dissect(tvb, pinfo, tree)
end

local function heuristic(tvb, pinfo, tree)
    if not looks_like_ndma(tvb) then
        return false
    end
    dissect(tvb, pinfo, tree)
    return true
end

local udp_port = DissectorTable.get("udp.port")
for _, p in ipairs(PORTS) do
    udp_port:add(p, ndma)
end
ndma:register_heuristic("udp", heuristic)
