// The two programs of the real nodes' images, standard library only: pause (what holds a pod's namespaces, the
// image containerd's sandbox_image names) and hello (prints a line, or serves it, or gets it from another pod: what
// the tests run on real nodes).
module dl2.io/tools/pause

go 1.26.0
