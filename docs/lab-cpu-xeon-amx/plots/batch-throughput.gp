# Made by dlperf lab. Rerun with: gnuplot /tmp/ab/lab2/plots/batch-throughput.gp
set terminal pngcairo size 900,560 enhanced font 'Sans,10'
set output '/tmp/ab/lab2/plots/batch-throughput.png'
set title 'Throughput by batch size'
set ylabel 'images per second'
set grid ytics
set key top left
set yrange [0:*]
set xlabel 'batch size'
set logscale x 2
set offsets graph 0.05, graph 0.05, 0, 0
plot '/tmp/ab/lab2/plots/batch-throughput-0.dat' using 1:2 with linespoints lw 2 pt 7 title 'fixed lr', '/tmp/ab/lab2/plots/batch-throughput-1.dat' using 1:2 with linespoints lw 2 pt 7 title 'linear lr scaling'
