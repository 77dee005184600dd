# rdmactl qualify on a Soft-RoCE port of the real kernels, with rdmad
# running and declaring the port's TOS (the guest's [[roce]] rule for
# rdma_rxe): a port with a process's queue pair (ibv_rc_pingpong's server,
# as the kernel's resource tracker lists it) is refused; without it, RoCE
# mode is refused (rxe takes RoCE v2 only; the kernel's errno is reported), TOS works and its
# inotify notification is seen with its latency, DCB, pause and the storm
# timeout are not offered by the veth; rdmad holds off its corrections the
# whole time (it logs the hold and its end and corrects nothing of the
# port), every value is put back, and the results agree with rdmad's
# notification table. Sourced by rdmad-e2e.sh (fail, pass, info, wait_for,
# ensure_veth, tos_of, mode_of, journal_cursor, journal_since...).

register 1 "bookworm trixie" qualify-rxe
extra_timeouts[qualify-rxe]=240

qualify_dev=rxeq0

qualify_cleanup() {
	[[ -n ${qualify_pp:-} ]] && kill "$qualify_pp" 2>/dev/null && wait "$qualify_pp" 2>/dev/null
	rdma link delete "$qualify_dev" 2>/dev/null
	ip link del qlft0 2>/dev/null
	return 0
}

# qualify_rc: the RC queue pairs of the device, as iproute2's rdma lists
# them ("LQPN PID" a line).
qualify_rc() {
	rdma -j res show qp link "$qualify_dev/1" 2>/dev/null | jq -r '.[] | select(.type == "RC") | "\(.lqpn) \(.pid)"'
}

s_qualify-rxe() {
	local out rc cursor mode q ms s
	trap qualify_cleanup EXIT
	ensure_veth qlft0 qlfp0 || fail "cannot make qlft0"
	rdma link add "$qualify_dev" type rxe netdev qlft0 || fail "rdma link add $qualify_dev"
	wait_for 10 tos_is "$qualify_dev" "$declared_tos" || fail "$qualify_dev/1 never got tos $declared_tos from rdmad (it is '$(tos_of "$qualify_dev")')"
	mode=$(mode_of "$qualify_dev")

	# A process's queue pair on the port: refused, and named as rdma names it.
	ibv_rc_pingpong -d "$qualify_dev" -p 18533 >/dev/null 2>&1 &
	qualify_pp=$!
	wait_for 20 bash -c "[[ -n \$(rdma -j res show qp link $qualify_dev/1 2>/dev/null | jq -r '.[] | select(.type == \"RC\") | .lqpn') ]]" ||
		fail "ibv_rc_pingpong made no RC queue pair on $qualify_dev: $(rdma res show qp 2>&1 | tr '\n' ';')"
	read -r q _ <<<"$(qualify_rc)"
	out=$(rdmactl -o json qualify --yes "$qualify_dev" 2>&1)
	rc=$?
	((rc == 1)) || fail "qualify of a port with a process's queue pair: exit $rc: $out"
	jq -e --argjson q "$q" --argjson pid "$qualify_pp" '.ports[0].refused != "" and ([.ports[0].queue_pairs[] | select(.lqpn == $q and .type == "RC" and .pid == $pid)] | length) == 1 and
		([.ports[0].queue_pairs[] | select(.type == "GSI")] | length) == 0 and (.ports[0].results | length) == 0' <<<"$out" >/dev/null ||
		fail "refusal of a port in use (RC queue pair $q of pid $qualify_pp): $out"
	kill "$qualify_pp" 2>/dev/null
	wait "$qualify_pp" 2>/dev/null
	qualify_pp=
	wait_for 10 bash -c "[[ -z \$(rdma -j res show qp link $qualify_dev/1 2>/dev/null | jq -r '.[] | select(.type == \"RC\") | .lqpn') ]]" ||
		fail "the RC queue pair stayed after ibv_rc_pingpong ended"
	[[ $(tos_of "$qualify_dev") == "$declared_tos" && $(mode_of "$qualify_dev") == "$mode" ]] || fail "a refused qualify changed $qualify_dev"

	cursor=$(journal_cursor)
	out=$(rdmactl -o json qualify --yes "$qualify_dev" 2>&1)
	rc=$?
	((rc == 0)) || fail "qualify $qualify_dev: exit $rc: $out"
	qr() { jq -r --arg s "$1" ".ports[0].results[] | select(.setting == \$s) | $2" <<<"$out"; }
	jq -e --arg k "$(uname -r)" '.kernel == $k and .rdmad == "holding off" and .ports[0].held and .ports[0].refused == null and
		(.unrestored | length) == 0 and .ports[0].driver == "rdma_rxe"' <<<"$out" >/dev/null ||
		fail "the report: $(jq -c '{kernel, rdmad, unrestored, notes, port: (.ports[0] | {device, driver, held, refused})}' <<<"$out" 2>&1)"
	# rxe takes RoCE v2 only: the kernel refuses v1 (EINVAL on 6.1), and
	# a refused write is no change to announce.
	[[ $(qr roce_mode '.result + " " + (.notified | tostring)') == "refused false" && $(qr roce_mode .errno) == E* ]] ||
		fail "RoCE mode: $(qr roce_mode .)"
	[[ $(qr roce_tos '.result + " " + .notice + " " + (.notified | tostring) + " " + (.restored | tostring)') == "works inotify true true" ]] ||
		fail "TOS: $(qr roce_tos .)"
	ms=$(qr roce_tos .notification_ms)
	for s in qos_pfc qos_trust qos_prio_tc qos_tc_maxrate qos_prio_buffer qos_pause qos_pfc_storm_timeout; do
		[[ $(qr "$s" .result) == "not offered" ]] || fail "$s on the veth: $(qr "$s" .)"
	done
	[[ $(qr qos_pfc .detail) == *"qlft0 has no DCB"* ]] || fail "PFC's detail: $(qr qos_pfc .detail)"
	jq -e '[.ports[0].results[] | select(.restored | not)] | length == 0' <<<"$out" >/dev/null ||
		fail "not put back: $(jq -c '[.ports[0].results[] | select(.restored | not)]' <<<"$out")"
	jq -e '[.ports[0].results[] | .disagrees // [] | .[]] | length == 0' <<<"$out" >/dev/null ||
		fail "disagrees with rdmad's tables: $(jq -c '[.ports[0].results[] | select(.disagrees) | {setting, disagrees}]' <<<"$out")"
	jq -e '[.notes[] | select(test("notifications not compared"))] | length == 0' <<<"$out" >/dev/null ||
		fail "rdmad's notification table was not compared: $(jq -c .notes <<<"$out")"
	[[ $(tos_of "$qualify_dev") == "$declared_tos" && $(mode_of "$qualify_dev") == "$mode" ]] ||
		fail "after qualify $qualify_dev/1 holds mode '$(mode_of "$qualify_dev")' tos '$(tos_of "$qualify_dev")', was '$mode' $declared_tos"
	qlog() { journal_since "$cursor"; }
	wait_for 10 bash -c "journalctl --after-cursor='$cursor' -u rdmad.service --no-pager -o cat | grep -F 'corrections released' | grep -qF 'subject=$qualify_dev/1'" ||
		fail "rdmad logged no end of the hold: $(qlog | grep -F "$qualify_dev" | tail -n 5 | tr '\n' ';')"
	qlog | grep -F 'corrections held' | matches -F "subject=$qualify_dev/1" || fail "rdmad logged no hold of $qualify_dev/1"
	if qlog | grep -F "corrected a setting changed behind rdmad's back" | matches -F "subject=$qualify_dev/1 "; then
		fail "rdmad corrected $qualify_dev/1 while qualify held it: $(qlog | grep -F corrected | tr '\n' ';')"
	fi
	info "qualify-rxe kernel=$(uname -r) roce_mode=refused($(qr roce_mode .errno)) roce_tos notification_ms=$ms"
	pass "a port with RC queue pair $q refused; RoCE mode refused ($(qr roce_mode .errno)), TOS works, inotify after ${ms} ms, DCB/pause/storm timeout not offered; rdmad held off and corrected nothing; everything put back"
}
