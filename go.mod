module github.com/kvready/kvready

go 1.26

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/ebitengine/purego v0.11.3
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/looplab/fsm v1.0.3 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
