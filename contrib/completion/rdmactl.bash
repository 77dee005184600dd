# bash completion for rdmactl(8)

_rdmactl_devices() {
    local bus=()
    [[ -n $1 ]] && bus=(--bus "$1")
    rdmactl "${bus[@]}" device list 2>/dev/null | awk '{print $1}'
}

_rdmactl() {
    local cur prev words cword
    _init_completion || return
    local bus="" i cmd="" sub=""
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            --bus) bus=${words[i + 1]}; ((i++)) ;;
            --bus=*) bus=${words[i]#--bus=} ;;
            -o | --output) ((i++)) ;;
            -*) ;;
            *) if [[ -z $cmd ]]; then cmd=${words[i]}; elif [[ -z $sub ]]; then sub=${words[i]}; fi ;;
        esac
    done
    case $prev in
        --bus) COMPREPLY=($(compgen -W "system session" -- "$cur")); return ;;
        -o | --output) COMPREPLY=($(compgen -W "text json" -- "$cur")); return ;;
        --mode) COMPREPLY=($(compgen -W "v1 v2" -- "$cur")); return ;;
        --type) COMPREPLY=($(compgen -W "rxe siw" -- "$cur")); return ;;
        --netdev) COMPREPLY=($(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur")); return ;;
        --tos) return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "--bus -o --persist --mode --tos --type --netdev --help" -- "$cur"))
        return
    fi
    case $cmd in
        "") COMPREPLY=($(compgen -W "status device roce link netns reload reconcile doctor" -- "$cur")) ;;
        netns)
            if [[ -z $sub ]]; then COMPREPLY=($(compgen -W "set" -- "$cur"))
            else COMPREPLY=($(compgen -W "shared exclusive" -- "$cur")); fi ;;
        device)
            if [[ -z $sub ]]; then COMPREPLY=($(compgen -W "list show" -- "$cur"))
            elif [[ $sub == show ]]; then COMPREPLY=($(compgen -W "$(_rdmactl_devices "$bus")" -- "$cur")); fi ;;
        roce)
            if [[ -z $sub ]]; then COMPREPLY=($(compgen -W "show set" -- "$cur"))
            else COMPREPLY=($(compgen -W "$(_rdmactl_devices "$bus")" -- "$cur")); fi ;;
        link)
            if [[ -z $sub ]]; then COMPREPLY=($(compgen -W "list add del" -- "$cur")); fi ;;
    esac
}
complete -F _rdmactl rdmactl
