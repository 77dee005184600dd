package host

// SetBeforeRename installs the WriteFileAtomic seam (nil removes it).
func SetBeforeRename(fn func(tmp string)) { beforeRename = fn }
