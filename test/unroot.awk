# unroot.awk: removes the fixture root (-v root=DIR) from the demo's output and
# keeps its tables aligned. rdmactl and busctl size each column for the paths
# they were given (/tmp/rdmad-demo.XXXXXX/host2/etc/rdma/...); removing the
# prefix afterwards shortens some cells and not others. A table is a header
# line of capitalised column names (PORT  MODE ..., NAME  TYPE  SIGNATURE
# RESULT/VALUE  FLAGS) up to the next empty line: each row is cut where the
# header's names start, the root is removed from each cell, and the columns
# are padded again to their new widths. Everything else only loses the root.
function unroot(s) {
	if (root == "") return s
	out = ""
	while ((i = index(s, root)) > 0) {
		out = out substr(s, 1, i - 1)
		s = substr(s, i + length(root))
	}
	return out s
}
function rtrim(s) { sub(/[ \t]+$/, "", s); return s }
function flush(    r, c, line, cell) {
	for (r = 1; r <= nrows; r++) {
		line = ""
		for (c = 1; c <= ncols; c++) {
			cell = cells[r, c]
			if (c < ncols)
				line = line sprintf("%-" (width[c] + sep[c]) "s", cell)
			else
				line = line cell
		}
		print rtrim(line)
	}
	nrows = 0
	ncols = 0
	intable = 0
}
function header(line,    rest, pos, n) {
	# Column starts: each name and the spaces before the next one.
	ncols = 0
	pos = 1
	rest = line
	while (match(rest, /[A-Z][A-Z_\/]*/)) {
		ncols++
		start[ncols] = pos + RSTART - 1
		pos += RSTART + RLENGTH - 1
		rest = substr(rest, RSTART + RLENGTH)
	}
	# The separator between two columns is what is left of a column in
	# its widest row: one space (busctl) or two (rdmactl).
	for (n = 1; n <= ncols; n++) {
		width[n] = 0
		sep[n] = 1000
	}
}
function row(line,    c, cell) {
	nrows++
	for (c = 1; c <= ncols; c++) {
		if (c < ncols) {
			cell = rtrim(substr(line, start[c], start[c + 1] - start[c]))
			if (start[c + 1] - start[c] - length(cell) < sep[c]) sep[c] = start[c + 1] - start[c] - length(cell)
		} else
			cell = substr(line, start[c])
		cell = rtrim(unroot(cell))
		cells[nrows, c] = cell
		if (length(cell) > width[c]) width[c] = length(cell)
	}
}
/^[A-Z][A-Z_\/]*( +[A-Z][A-Z_\/]*)+ *$/ && !intable {
	header($0)
	intable = 1
	nrows = 0
	row($0)
	next
}
intable && $0 == "" { flush(); print; next }
intable { row($0); next }
{ print unroot($0) }
END { if (intable) flush() }
