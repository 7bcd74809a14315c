module httppoolbench

go 1.22
