# fixture-state.awk: reads a fixture's fixture/kernel.json (as rdmad writes
# it: one key or array element a line, docs/fixtures.md) for `make demo`.
#   awk -f fixture-state.awk FILE                    the netdevs with DCB as a table:
#       PFC priorities, trust (DSCP entries in the APP table: dscp, none: pcp),
#       pause, cable length (the PFC delay), ETS priority -> class, and each
#       class's share or transmission selection
#   awk -v clear_app=NETDEV -f fixture-state.awk FILE  FILE with NETDEV's APP
#       table emptied, as another DCB tool deleting its entries would leave it
function key(s) { sub(/^"/, "", s); sub(/".*/, "", s); return s }
function path(   i, p) {
	p = ""
	for (i = 1; i <= depth; i++) if (stack[i] != "") p = p (p == "" ? "" : ".") stack[i]
	return p
}
{
	line = $0; sub(/^ +/, "", line); comma = sub(/,$/, "", line)
	if (skipping) {
		if (line == "]") { print indent "\"app\": []" (comma ? "," : ""); skipping = 0 }
		next
	}
	if (clear_app != "" && line == "\"app\": [" && path() == "netdev." clear_app ".dcb") {
		indent = $0; sub(/[^ ].*/, "", indent)
		skipping = 1
		next
	}
	if (clear_app != "") print
}
line == "{" { stack[++depth] = ""; next }
line ~ /^"[^"]*": \{\}$/ { if (depth == 2) order[++count] = key(line); next }
line ~ /^"[^"]*": \{$/ { stack[++depth] = key(line); if (depth == 3) order[++count] = key(line); next }
line ~ /^"[^"]*": \[\]$/ { val[path() "." key(line)] = ""; next }
line ~ /^"[^"]*": \[$/ { stack[++depth] = key(line); inarray = 1; acc = ""; next }
line == "]" { val[path()] = acc; depth--; inarray = 0; next }
line == "}" { depth--; next }
inarray { v = line; gsub(/"/, "", v); acc = acc (acc == "" ? "" : ",") v; next }
line ~ /^"[^"]*": / { v = line; sub(/^"[^"]*": /, "", v); gsub(/"/, "", v); val[path() "." key(line)] = v; next }
END {
	if (clear_app != "") exit
	printf "  %-11s %-5s %-6s %-6s %-6s %-16s %s\n", "NETDEV", "PFC", "TRUST", "PAUSE", "CABLE", "PRIO_TC", "TC_BW"
	for (i = 1; i <= count; i++) {
		n = "netdev." order[i]
		if (!((n ".dcb.pfc.prio_pfc") in val)) continue
		pfc = val[n ".dcb.pfc.prio_pfc"]; if (pfc == "") pfc = "none"
		trust = (val[n ".dcb.app"] ~ /dscp-prio/) ? "dscp" : "pcp"
		pause = (val[n ".pause.rx"] == "true" || val[n ".pause.tx"] == "true") ? "on" : "off"
		split(val[n ".dcb.ets.tc_bw"], bw, ","); split(val[n ".dcb.ets.tc_tsa"], tsa, ","); shares = ""
		for (c = 1; c <= 8; c++) shares = shares (c > 1 ? "," : "") (tsa[c] == "ets" ? bw[c] "%" : tsa[c])
		printf "  %-11s %-5s %-6s %-6s %-6s %-16s %s\n", order[i], pfc, trust, pause, val[n ".dcb.pfc.delay"] " m", val[n ".dcb.ets.prio_tc"], shares
	}
}
