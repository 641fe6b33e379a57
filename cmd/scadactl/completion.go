package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// runCompletion prints a shell completion script for scadactl's commands
// and subcommands, built from the command table so it cannot fall behind.
func runCompletion(_ context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("completion", flag.ContinueOnError)
	pos, err := g.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (pos[0] != "bash" && pos[0] != "zsh") {
		return usagef("completion bash|zsh")
	}
	if pos[0] == "zsh" {
		// zsh runs bash completion functions through bashcompinit.
		fmt.Fprint(g.stdout, "autoload -U +X bashcompinit && bashcompinit\n")
	}
	writeBashCompletion(g.stdout)
	return nil
}

// subcommands are a command's subcommands as its summary lists them
// ("members list | add ID RAFT_ADDR | remove ID": list, add, remove).
func subcommands(c command) []string {
	parts := strings.Split(c.summary, " | ")
	if len(parts) < 2 {
		return nil
	}
	var out []string
	for i, p := range parts {
		words := strings.Fields(p)
		if i == 0 && len(words) > 0 && words[0] == c.name {
			words = words[1:]
		}
		if len(words) > 0 {
			out = append(out, words[0])
		}
	}
	return out
}

func writeBashCompletion(w io.Writer) {
	var names []string
	var cases strings.Builder
	for _, c := range commands() {
		names = append(names, c.name)
		if subs := subcommands(c); len(subs) > 0 {
			fmt.Fprintf(&cases, "\t\t%s) words=%q ;;\n", c.name, strings.Join(subs, " "))
		}
	}
	fmt.Fprintf(w, `# scadactl completion: source this file, or add to your shell's startup
# file: source <(scadactl completion bash)
_scadactl() {
	local cur=${COMP_WORDS[COMP_CWORD]} cmd="" at=0 i words=""
	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		--endpoints|-endpoints|--certs|-certs|--cacert|-cacert|--cert|-cert|--key|-key|--output|-output|-o|-w|--timeout|-timeout) ((i++)) ;;
		-*) ;;
		*) cmd=${COMP_WORDS[i]}; at=$i; break ;;
		esac
	done
	if [[ -z $cmd ]]; then
		words=%q
	elif ((COMP_CWORD == at + 1)); then
		case $cmd in
%s		esac
	fi
	[[ -n $words ]] && COMPREPLY=($(compgen -W "$words" -- "$cur"))
	return 0
}
complete -o default -F _scadactl scadactl
`, strings.Join(names, " "), cases.String())
}
