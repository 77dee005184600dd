# complete.zsh FPATHDIR LINE: types LINE and TAB into an interactive zsh
# (zsh/zpty: a real terminal, compinit, the completion widget) whose fpath
# starts with FPATHDIR, and prints each match completion would offer, one a
# line. compadd is wrapped to print what the builtin matched (compadd -O)
# instead of adding it; compprefuncs/comppostfuncs mark the start and end
# of one completion, after which the inner shell exits.
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "PS1= PROMPT= RPROMPT=; fpath=(${(q)1} \$fpath)"
zpty -w z 'autoload -Uz compinit && compinit -u -D'
zpty -w z 'compadd() { if (( ${@[(I)-[OAD]*]} )); then builtin compadd "$@"; return; fi; local -a __hits; builtin compadd -O __hits "$@"; local r=$?; (( $#__hits )) && print -rl -- "<hit>"${^__hits}; return r; }'
# The marker is spelt apart here so that the shell's echo of this line is
# not taken for it.
zpty -w z 'mark() { print -r -- "<mar""k>" }; compprefuncs=(mark); comppostfuncs=(mark exit)'
zpty -w z 'bindkey "^I" complete-word'
zpty -w z "$2"$'\t'
marks=0
while zpty -r z line; do
	line=${line//$'\r'/}
	[[ $line == *'<mark>'* ]] && (( ++marks ))
	[[ $line == '<hit>'* ]] && print -r -- ${line#'<hit>'}
	(( marks >= 2 )) && break
done
zpty -d z
(( marks >= 2 )) || { print -u2 "complete.zsh: completion did not run"; exit 1; }
