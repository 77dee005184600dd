package roce_test

import (
	"os"
	"path/filepath"
)

func removeAll(root, rel string) error { return os.RemoveAll(filepath.Join(root, rel)) }
func mkdir(root, rel string) error     { return os.MkdirAll(filepath.Join(root, rel), 0o755) }
